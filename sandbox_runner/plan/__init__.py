"""What to run: the chain DSL (`dsl`), the config files as pydantic models (`config`, each on
the base in `model`; their JSON read strictly by `config_file`), a run's chain made ready from
either (`planned`), the sandbox settings and their one merge (`sandbox`), prompt resolution
(`prompts`), agent resolution (`agents`), egress allow-list entries (`allow`) and the Docker
engine a sandbox runs on (`engine`). Pure data and the host files it reads; imports only
`errors` and `paths`.
"""
