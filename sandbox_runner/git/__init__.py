"""Host-side git: `runner` (plain subprocess queries, no GitPython on start-up paths), `repo`
(the user's repository, step branches, importing a sandbox's bundle, merging a step back).
Imports only `errors` and `records.layout` (the names of `.forge/`); never reads or runs
anything inside a sandbox's workspace.
"""
