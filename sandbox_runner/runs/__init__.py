"""One run from its first check to its record's last word: `lifecycle` makes a run's backend
(the one place it is made) and checks it, holds the run lock, creates the run record (the one
place one is made), opens the backend's session around the steps, finishes the record, and
decides what an interruption or a failure leaves of it, for `fks run` and each forge worker
alike. Imports `backends` (its factory), `steps`, `records`, `git` and `plan`; imported only by
`commands` and `forge`.
"""
