"""The Docker backend: every step in hardened containers on a workspace of its own (a Docker
volume) and a branch of its repository, its commits brought home as a size-bounded bundle.

`backend` is the `Backend` (`SandboxBackend`) that ties the rest together; `target` what the
backend needs of where steps run, `targets` is where a run's steps run, chosen once per run:
the local engine, a remote engine or a swarm, each with its own connection, refusals,
workspaces and clean-up; `settings` a step's container as values (network mode, limits,
credentials, labels); `agent_view` the agent as its container sees it; `preflight` (with
`checks`, settings checked before a run) what is checked once the engine answers; `landing`
what becomes of a step's work (synced after each iteration, salvaged when stopped, merged into
its base through `sandbox_runner.git`); `cleanup` what dead runs left, found and removed for
`fks clean`.

Sub-packages: `engine/` the engine a run talks to (this machine's, a remote one, a swarm's
manager), shared by all; `runners/` what runs one iteration (a container, warm containers, a
swarm service and its log stream); `workspace/` the step's volume and how its work crosses to
the host (the export and `iteration.sh`, objects shipped to a remote engine, a swarm's
workspace, the background reaper); `egress/` what an agent may reach (the egress proxy, its
Squid configuration, its refusals, the run's pool of proxies). The images are built and sent by
`sandbox_runner.images`. The `docker` package is imported lazily, inside functions, so `fks
--help` never loads it.
"""
