"""The benchmarks of scripts/bench.py, one module per area; `common` holds what they share."""
