"""How a step runs: `chain` runs steps in order with landing between them, `runner` runs one
step (of a chain or a forge stage alike: workspace, loop, landing, its record), `loop` runs one
step's iterations (retries, rate limits, no-progress), `marker` reads the agent's
output for the completion marker, `reporter` the protocol through which it tells the user
(implemented by `ui`). Knows backends only through `backends.api`, and writes to the run's
record what they return (`runner`); imports `plan`, `results` and `records`, never `ui`, Docker
or git.
"""
