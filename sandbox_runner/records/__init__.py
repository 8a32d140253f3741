"""What a run leaves behind under `.forge/` (laid out by `layout.ForgeLayout`): run records
(`store`, whose `RecordWriter`/`ActiveRun` methods are their only writer), the results the loop
produces (`results`) and what an iteration reported in both (`reported`), what "landed" means
(`landed`), the run lock (`lock`), resuming a killed run (`resume`), JUnit reports
(`junit`), and secret masking for logs (`masking`). Imports `errors`, `plan`, `git.runner` and
`console.ansi`; nothing from engine or backends.
"""
