"""The pages of `fks ui`, one module each; each exposes `routes` (Starlette routes)."""
