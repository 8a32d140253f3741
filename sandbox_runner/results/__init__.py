"""What iterations and steps produced, as values every layer passes up: how they ended
(`ended`: `IterationResult`, `StepOutcome`) and what an iteration reported beside its exit code
(`reported`: Claude's numbers, the requests made through the egress proxy). The loop makes
them, backends return them adjusted (an iteration's synced work and traffic, a step's landing),
the run record keeps them and every display shows them. Imports only `outcomes` (and pydantic):
every layer may read it, and it reads none.
"""
