"""What the tests and `scripts/bench.py` share, imported as a package (never through
`sys.path`): the scripted fake of the Anthropic Messages API that drives the real `claude` CLI
(`fakeapi`, with its conversations and wire formats), helpers that make git repositories and
run the `fks` console script (`helpers`), and the machinery of the second-engine and two-node
swarm fixtures (`engines`). Nothing else in the package imports it.
"""
