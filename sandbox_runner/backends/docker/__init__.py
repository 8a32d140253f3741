"""The Docker backend: `client` (connecting, daemon diagnosis, retries), `container` (settings and
one container's execution), `service` (an iteration as a swarm service: output from its log
stream, its end from its task, a lost node noticed), `warm` (the next iterations' containers
started while one runs), `workspace`/`export`/`iteration.sh` (the step's volume and the bundle
that leaves it, through the API or the log stream), `egress` (the allowlist proxy) and `squid` (its configuration), `checks` (settings checked before a run),
`images` and `base_image` (building the images), `engines` (a `sandbox.engine` value turned into
a client of that engine), `push` (images sent to another engine through the API), `backend` (the `Backend` that ties them
together and lands each step through `sandbox_runner.git`). The `docker` package is imported
lazily, inside functions, so `fks --help` never loads it.
"""
