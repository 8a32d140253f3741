"""What the tests and `scripts/bench.py` share, imported as a package (never through
`sys.path`): the scripted fake of the Anthropic Messages API that drives the real `claude` CLI
(`fakeapi`, with its conversations and wire formats), helpers that make git repositories and
run the `fks` console script (`helpers`), running fks with the claude CLI against the fake
(`claude`) and the scripted agents that answer it (`teams`), fakes of the OpenAI Responses and
Gemini APIs (`fakemodels`) and the real Codex, Gemini CLI and OpenCode run against them
(`agentclis`), running `fks run --sandbox` and
looking at its containers, volumes and records (`sandboxed`), agent containers made by the
sandbox's own settings and runner (`containers`), the attacker harness (`attacks`),
the forge pipeline on the fake sandbox (`forge`), recorded runs for `fks runs` (`runs`), local
HTTPS origins and a git server for the secrets by destination (`origins`), and the machinery
of the second-engine and two-node swarm fixtures (`engines`) and what the swarm tests share
besides (`swarm`). Nothing else in the package
imports it.
"""
