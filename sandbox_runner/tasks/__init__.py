"""forge-tasks: the Markdown task database under forge/tasks/ that agents share."""
