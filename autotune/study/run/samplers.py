"""The samplers a study can use, by name: the one factory (Optuna's samplers, set as the
replay of a recorded table chose, docs/samplers.md)."""

from __future__ import annotations

import warnings

import optuna

from autotune.core.plan.study_request import SAMPLERS


def make_sampler(seed: int | None, name: str = "tpe", startup_trials: int = 5
                 ) -> optuna.samplers.BaseSampler:
    """tpe (the default, chosen by replaying samplers against a recorded table: docs/samplers.md):
    multivariate TPE over the conditional, mixed space; the constant liar counts every worker's
    running trials as bad, so that parallel workers spread; ``startup_trials`` 5, as the replay
    chose. gp tied it there at 30 times the sampling cost; random and nsga2 (a population of 10, not
    50, so that evolution starts within a budget) are there to compare. All are constraint-aware
    (``Trial.set_constraint``) and reproducible for a seed; ``name`` is one of ``SAMPLERS``."""
    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, n_startup_trials=startup_trials,
            constant_liar=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=10)
    if name == "gp":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup_trials)
    raise ValueError(f"sampler {name!r} is not one of {SAMPLERS}")
