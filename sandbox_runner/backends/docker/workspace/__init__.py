"""A step's workspace and how its work crosses to the host: `volume` (the Docker volume that
holds the step's repository, and the objects it borrows; it also says how an iteration on it
runs and how its export comes back), `sandbox` (the `Sandbox` that runs a step's iterations on
it and imports their commits), `exporting` (one running iteration, its output and its export),
`export` with `iteration.sh` (the script that wraps every iteration in the container, and the
size-bounded readers of its report and bundle), `shipping` (the objects an engine that cannot
see this machine's disk gets, sent as packs) and `reaper` (finished workspaces removed in the
background). Nothing here runs git in, or follows a path inside, anything the agent could write.
"""
