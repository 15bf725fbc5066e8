"""Tiny local checkpoints for the CPU build, tests and benchmarks: random, trained or
constructed weights (torch and transformers imported lazily)."""
