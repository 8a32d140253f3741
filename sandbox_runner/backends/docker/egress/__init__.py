"""What a sandboxed agent may reach: `proxy` (the run's egress proxy container: the allow-list
and the model API with the key added outside the agent's reach, reached by the agent only
through sockets in a volume), `squid` (the proxy's configuration), `refusals` (the
destinations it refused, read from its log, bounded and counted for each iteration) and
`pool` (the run's proxies, one per allow-list, and a step's container routed through one).
"""
