"""Where a step runs. `api` holds the protocols every backend implements (`Backend` for a step,
`Sandbox`/`Execution` for one agent process) and their value types; `factory` builds the one a
run asks for; `local` runs agents as host processes, `fake` replays scripted output for tests,
`docker/` runs each iteration in a disposable container on a workspace volume. Imports `plan`,
`records`, `git` and `console.ansi` (escape stripping); never `steps` or `commands` (except types
under TYPE_CHECKING).
"""
