"""The Docker engine a run talks to: `client` (connecting to this machine's engine, pinging
it, retrying what a busy daemon refuses, removing volumes) and `connect` (a `sandbox.engine`
value — the local engine, `tcp://`/`ssh://` engines, a swarm — turned into a client of that
engine, with the TLS and timeouts it needs)."""
