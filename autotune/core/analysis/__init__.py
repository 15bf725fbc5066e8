"""A study's results: the stored plan, scheduling of workers, the front and estimates, effects,
recommendations. Pure."""
