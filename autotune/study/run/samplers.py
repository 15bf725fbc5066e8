"""The samplers a study can use, by name: the one factory (Optuna's samplers, set as the
replay of a recorded table chose, docs/samplers.md)."""

from __future__ import annotations

import warnings

import optuna

from autotune.core.plan.request import SAMPLERS


def make_sampler(seed: int | None, name: str = "tpe", startup_trials: int = 5
                 ) -> optuna.samplers.BaseSampler:
    """tpe (the default): multivariate TPE over the conditional, mixed space; the choice and its
    settings come from replaying samplers against a recorded table
    (`benchmarks/sampler_efficiency.py`, docs/samplers.md). The constant liar counts
    running trials (of every worker) as bad, so parallel workers spread. gp (Optuna's
    Gaussian-process sampler) tied it there at 30 times the sampling cost; random and nsga2 (a
    population of 10, not Optuna's 50, so that evolution starts within a study's budget) are
    there to compare against. All are constraint-aware through ``Trial.set_constraint`` and
    reproducible for a seed. ``name`` is one of ``SAMPLERS`` (checked by plans.build_plan);
    ``startup_trials`` (random trials before the model is used) is 5, as the replay chose."""
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
