"""What a sandboxed agent may reach: `proxy` (the run's egress proxy container: the allow-list
and the model API with the key added outside the agent's reach, reached by the agent only
through sockets in a volume), `upstream` (the model APIs by kind and their credentials), `meter` (the
mitmproxy addon in the proxy's container that reads each API response's usage and holds the
budget) and `metering` (its config and its lines, read on the host), `squid` and
`glue` (the proxy's configuration, and the scripts that join the agent to it), `access_log`
(Squid's access log, read line by line: the one reader every proxy uses), `followed_log`
(the proxies' log followed in a thread and counted until taken), `audit` and
`refusals` (the requests and the destinations refused, bounded and counted for each
iteration) and `pool` (the run's proxies, one per allow-list, and a step's container routed
through one).
"""
