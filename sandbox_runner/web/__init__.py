"""`fks ui`: the run records, step branches and forge backlog as a local web app (Starlette,
Jinja2), for the repository it runs in or every one with records. Everything an agent wrote is
hostile data here: escaped in every template, under a strict Content Security Policy, behind a
token only the user who started it has."""
