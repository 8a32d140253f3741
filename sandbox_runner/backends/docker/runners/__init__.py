"""What runs one iteration: `container` (the hardened container's settings, and one container
started, streamed, stopped and removed), `warm` (the next iterations' containers started while
one runs), `service` (on a swarm: an iteration as a single-task service, its end read from its
task, a lost node noticed) and `logs` (that service's log stream, read into a bounded queue).
Every runner hands back an `Execution` (`backends/api.py`); none of them knows workspaces,
branches or run records. Imports only `backends.api`, `backends.docker.engine.client`/`checks`,
`labels`, `errors` and `signals`.
"""
