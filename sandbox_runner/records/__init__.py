"""What a run leaves behind under `.forge/`: run records (`store`), the run lock (`lock`),
resuming a killed run (`resume`), JUnit reports (`junit`), and secret masking for logs
(`masking`). Imports `errors`, `plan` and `git.runner`; nothing from engine or backends.
"""
