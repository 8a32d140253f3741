"""What to run: the chain DSL (`dsl`), the config files as pydantic models (`config`), prompt
resolution (`prompts`), agent resolution (`agents`) and egress allow-list entries (`allow`).
Pure data and the host files it reads; imports only `errors` and `paths`.
"""
