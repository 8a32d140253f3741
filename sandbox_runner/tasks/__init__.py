"""forge-tasks: the Markdown task database under forge/tasks/ that agents share.

`ids` (the id scheme), `model` (the file format), `store` (files and the lock),
`commands` (the verbs), `render` (plain and JSON output), `cli` (the typer app).
"""
