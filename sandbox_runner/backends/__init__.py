"""Where a step runs. `api` holds the protocols every backend implements (`Backend` for a step,
`Sandbox`/`Execution` for one agent process) and their value types; `factory` builds the one a
run asks for; `local` runs agents as host processes, `docker/` runs each iteration in a
disposable container on a workspace volume.

A backend never writes a run record, nor imports `records`: it reads what it needs of a step's
record through `api.StepSoFar` and returns what happened (`RunPlace`, `BranchBinding`, `Landed`,
an iteration's result with its synced work and traffic), which the step runner writes down.
Imports `plan`, `results`, `git` and `console.ansi` (escape stripping); never `steps`,
`records` or `commands`.
"""
