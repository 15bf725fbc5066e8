"""Racing inside a trial (core.trial.racing): a configuration beaten beyond the noise stops
early; one that could still be on the front never does. Synthetic data whose truth is known."""

from __future__ import annotations

import math

import numpy as np

from autotune.core.maths.stats import Noise, NoiseModel, estimate
from autotune.core.trial.objectives import default_objectives
from autotune.core.trial.outcome import ProfileResult
from autotune.core.trial.racing import Member, Race, beaten, run_order
from autotune.core.workload.profiles import get_profile

OBJECTIVES = default_objectives((get_profile("low-concurrency"), get_profile("high-concurrency")))
NOISE = NoiseModel({o.name: Noise(0.05, 20, "pooled") for o in OBJECTIVES})
TRUTH = {"low-concurrency": ("mean_e2el_ms", 1000.0), "high-concurrency": ("output_throughput", 2000.0)}


def runs(e2el: float, tput: float, n: int = 1, rng=None, sd: float = 0.0) -> dict[str, ProfileResult]:
    def jitter() -> float:
        return math.exp(rng.normal(0, sd)) if rng is not None else 1.0
    return {"low-concurrency": ProfileResult("low-concurrency", tuple(
                {"mean_e2el_ms": e2el * jitter()} for _ in range(n))),
            "high-concurrency": ProfileResult("high-concurrency", tuple(
                {"output_throughput": tput * jitter()} for _ in range(n)))}


def race_against(e2el: float, tput: float) -> Race:
    member = Member("#0", (estimate([e2el, e2el], NOISE.of(OBJECTIVES[0].name)),
                           estimate([tput, tput], NOISE.of(OBJECTIVES[1].name))))
    return Race(OBJECTIVES, (member,), NOISE)


def test_a_trial_beaten_on_every_objective_beyond_the_noise_stops_after_one_run():
    why = beaten(race_against(1000.0, 2000.0), runs(1500.0, 1200.0))
    assert why.startswith("beaten by #0 beyond the noise after 1 run(s) per profile")


def test_a_trial_better_on_one_objective_could_be_on_the_front_and_is_never_stopped():
    assert beaten(race_against(1000.0, 2000.0), runs(900.0, 1200.0)) == ""
    assert beaten(race_against(1000.0, 2000.0), runs(2000.0, 2500.0)) == ""


def test_a_trial_worse_only_within_the_noise_is_not_stopped():
    assert beaten(race_against(1000.0, 2000.0), runs(1080.0, 1900.0)) == ""


def test_a_trial_without_a_run_of_every_objectives_profile_is_not_judged():
    only_low = {"low-concurrency": runs(5000.0, 1.0)["low-concurrency"]}
    assert beaten(race_against(1000.0, 2000.0), only_low) == ""


def test_a_trial_as_good_as_the_front_is_almost_never_stopped():
    rng = np.random.default_rng(0)
    stopped = sum(bool(beaten(race_against(1000.0, 2000.0), runs(1000.0, 2000.0, 1, rng, 0.05)))
                  for _ in range(2000))
    assert stopped / 2000 < 0.01


def test_runs_are_ordered_one_of_each_profile_first_cheapest_first():
    order = run_order(["low", "high"], 2, {"low": 30.0, "high": 5.0})
    assert order == [("high", 0), ("low", 0), ("high", 1), ("low", 1)]
    assert run_order(["low", "high"], 1, {}) == [("low", 0), ("high", 0)]  # unknown: as given
