"""Telling people what happened, through Apprise: `messages` (what a notification says, built
from a run record or a forge task, agent text neutralised), `send` (sending it to the `notify`
targets with bounded time, each delivery a record), `pages` (the `fks ui` page it links to),
`events` (the face the run's owner, forge and the pull-request code call). Imports `plan`,
`records` and the modules every layer shares; imported by `runs`, `forge` and `commands`.
"""
