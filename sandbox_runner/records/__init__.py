"""What a run leaves behind under `.forge/` (laid out by `layout.ForgeLayout`): run records
(`record`, the models; `store`, whose `RecordWriter`/`ActiveRun` methods are their only writer,
called by the step runner and the run's owner, never by a backend), what "landed" means
(`landed`), the run lock (`lock`), resuming a killed run (`resume`), JUnit reports
(`junit`), and secret masking for logs (`masking`). What iterations and steps produced is
`sandbox_runner.results`, which the records keep. Imports `errors`, `plan`, `results`,
`git.runner` and `console.ansi`; nothing from steps or backends.
"""
