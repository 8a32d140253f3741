"""fks: run coding agents unattended, in loops and chains, optionally in Docker sandboxes."""

__version__ = "0.1.0"
