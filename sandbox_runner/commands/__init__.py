"""One module per `fks` verb; each exposes plain functions returning an exit code."""
