"""What to run: the chain DSL (`dsl`), the config files as pydantic models (`config`), prompt
resolution (`prompts`) and agent resolution (`agents`). Pure data and the host files it reads;
imports only `errors` and `paths` (and, lazily, the egress allowlist type it validates).
"""
