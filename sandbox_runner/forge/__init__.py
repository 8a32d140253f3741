"""`fks forge`: the analyze → implement → review pipeline over forge-tasks, one task per
worker process, each on a branch of its own, approved tasks landing through a merge queue.

It sits between `commands` and the execution layers: it uses `engine` (one stage is one step
loop), `backends` (where a stage runs), `git`, `records` and `tasks`; nothing below imports it.
"""
