"""The Docker backend: every step in hardened containers on a workspace of its own (a Docker
volume) and a branch of its repository, its commits brought home as a size-bounded bundle.

`backend` is the `Backend` (`SandboxBackend`) that ties the rest together; `target` what the
backend needs of where steps run (a `Target`), `targets` the one place a run's target is
chosen: this machine's engine or a remote one (`LocalTarget`, `RemoteTarget`, there), or a
swarm (`swarm/`); `settings` a step's container as values (network mode, limits, credentials,
labels); `agent_view` the agent as its container sees it; `preflight` (with `checks`, settings
checked before a run) what is checked once the engine answers; `landing` what becomes of a
step's work (synced after each iteration, salvaged when stopped, merged into its base through
`sandbox_runner.git`; returned as values, for the caller to write to the record); `cleanup`
what dead runs left on an engine, found and removed for `fks clean` (which tells it, as
`target.Leftovers`, which runs are alive and what the dead ones' records say).

Sub-packages: `engine/` the engine a run talks to, shared by all; `runners/` what runs one
iteration (a container, warm containers); `workspace/` the step's volume and how its work
crosses to the host (the export and `iteration.sh`, objects shipped to a remote engine, the
background reaper); `egress/` what an agent may reach (the egress proxy, its Squid
configuration, its access log, the run's pool of proxies); `swarm/` everything a run on a swarm
needs besides (its target, services, workspaces, egress and clean-up). Generic modules never ask
which target they run on: the target, its workspaces and runners supply what differs. The
images are built and sent by `sandbox_runner.images`. The `docker` package is imported lazily,
inside functions, so `fks --help` never loads it.
"""
