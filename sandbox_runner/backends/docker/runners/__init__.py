"""What runs one iteration: `container` (the hardened container's settings, and one container
started, streamed, stopped and removed), `warm` (the next iterations' containers started while
one runs) and `iteration` (what a step's sandbox asks of any runner and of the iteration it
starts: how its end is known, the error when its place is lost, and `running`, its lifetime).
Every runner hands back an `Execution` (`backends/api.py`); none of them knows workspaces,
branches or run records. Imports only `backends.api`, `backends.docker.engine.client`/`checks`,
`labels`, `errors` and `signals`.
"""
