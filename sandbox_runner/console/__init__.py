"""What the user sees while a run goes: plain lines and --json (`output`), the live view
(`live`, rich), `fks forge run`'s view of its workers (`forge_view`: plain or live), and escape
stripping for agent output (`ansi`). Imports only value types.
"""
