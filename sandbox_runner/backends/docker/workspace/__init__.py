"""A step's workspace and how its work crosses to the host: `volume` (the Docker volume that
holds the step's repository, and the objects it borrows), `sandbox` (the `Sandbox` that runs a
step's iterations on it and imports their commits), `export` with `iteration.sh` (the script
that wraps every iteration in the container, and the size-bounded readers of its report and
bundle), `shipping` (the objects a remote engine cannot see, sent as packs), `swarm` (a
workspace pinned to one swarm node, its base fetched over HTTP from `PackServer`, its bundle
read from the log stream) and `reaper` (finished workspaces removed in the background).
Nothing here runs git in, or follows a path inside, anything the agent could write.
"""
