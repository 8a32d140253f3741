"""Where an agent process runs: the host (`local`), a Docker container (`docker`), or a script (`fake`)."""
