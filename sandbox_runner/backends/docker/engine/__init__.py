"""The Docker engine a run talks to: `client` (connecting to this machine's engine, pinging
it, retrying what a busy daemon refuses, removing volumes) and `connect` (a `sandbox.engine`
value turned into a client of that engine: this machine's, or a `tcp://`/`ssh://`/context one,
with the TLS and timeouts it needs)."""
