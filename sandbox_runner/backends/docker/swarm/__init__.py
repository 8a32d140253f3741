"""A run on a Docker Swarm this machine manages, everything the swarm needs in one room:
`target` (`SwarmTarget`, the `Target` the run's backend is given), `service` and `execution`
(an iteration as a single-task service, its end read from its task, a lost node noticed),
`log_stream` (that service's log stream, read into a bounded queue), `task_network` (the
network of a task that is to reach nothing), `workspace` (a workspace pinned to one node, its
base loaded by a service), `packs` (what the nodes fetch from this machine), `egress` (the egress proxy as a service on every
node, its config a swarm secret), `nodes` (fks's own scripts as services, on every node) and
`cleanup` (what runs leave on the swarm, removed). Imports the generic parts of the Docker
backend (`engine/`, `runners/`, `workspace/`, `egress/`, `cleanup`); nothing outside this
folder imports it but the factory of targets (`targets.target_for`).
"""
