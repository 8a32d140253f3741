"""What the user sees while a run goes: plain lines and --json (`output`), the live view
(`live`, rich), and escape stripping for agent output (`ansi`). Imports only value types.
"""
