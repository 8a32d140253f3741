"""Work that leaves the machine: a run's landed branch pushed to its GitHub remote and opened
(or updated) as a pull request through GitHub's REST API.

`target` finds the repository, API and token and checks them before any agent runs; `github`
is the REST client (httpx, retried with tenacity); `body` writes what the pull request says,
every piece of agent-written text neutralised; `publish` pushes and opens. It may import
`plan`, `records`, `git` and the shared modules; it returns values (`PullRecord`) and the run's
owner writes them down.
"""
