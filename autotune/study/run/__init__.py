"""Running a study: the plan built, trials run, the ask/tell loop, confirmation rounds, workers
reaped."""
