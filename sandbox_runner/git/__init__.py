"""Host-side git: `runner` (plain subprocess queries, no GitPython on start-up paths), `repo`
(the user's repository, step branches), `bundles` (importing a sandbox's bundle), `limits`
and `overwrites` (what a landing would write, and what it must leave alone), `landing`
(merging a step back).
Imports only `errors` and `records.layout` (the names of `.forge/`); never reads or runs
anything inside a sandbox's workspace.
"""
