"""The front, recommendations, effects and sign flips, on synthetic trials whose truth is known.

Trials are made by a seeded generator: each metric is a true value times lognormal noise of a
known size, so a parameter that does nothing must come out as "no effect detected", and a real
effect with its true sign.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from autotune.core.analysis.effects import effects, sign_flips
from autotune.core.analysis.recommendation import recommend
from autotune.core.analysis.study_data import StudyData, finalists, noise_of
from autotune.core.maths.pareto import knee, pareto_front
from autotune.core.maths.stats import (
    Noise,
    Verdict,
    compare,
    estimate,
    pooled_noise,
)
from autotune.core.trial.objectives import default_objectives
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.workload.profiles import get_profile

OBJECTIVES = default_objectives((get_profile("low-concurrency"), get_profile("high-concurrency")))
DEFAULTS = {"mtp": False, "level": 2, "noop": "a"}
# Trials below are searched once each (one deployment): their intervals rest on the GPU's assumed
# spread between deployments (3%), which the effects of this world (15-50%) exceed.
PLATFORM = "gpu"


def make(n: int, params: dict, truth: dict, *, rng: np.random.Generator, sd: float = 0.05,
         repeats: int = 2, reference: str = "") -> TrialOutcome:
    """A trial whose ``truth`` (profile -> metric -> value) is measured ``repeats`` times with
    multiplicative noise of log-sd ``sd``."""
    results = {p: ProfileResult(p, tuple({m: v * math.exp(rng.normal(0, sd)) for m, v in ms.items()}
                                         for _ in range(repeats)))
               for p, ms in truth.items()}
    return TrialOutcome(n, params=params, results=results, reference=reference)


def world(params: dict) -> dict:
    """The synthetic truth: MTP helps at low concurrency and hurts at high (the reference
    study's flip), level 0 is slow everywhere, ``noop`` does nothing."""
    slow = 0.5 if params["level"] == 0 else 1.0
    low_tput = 200.0 * slow * (1.3 if params["mtp"] else 1.0)
    high_tput = 1700.0 * slow * (0.85 if params["mtp"] else 1.0)
    return {"low-concurrency": {"output_throughput": low_tput, "mean_e2el_ms": 512_000 / low_tput},
            "high-concurrency": {"output_throughput": high_tput, "mean_e2el_ms": 25_600_000 / high_tput}}


def study_of(trials: list[TrialOutcome], baseline: int | None = 0) -> StudyData:
    base = next((t for t in trials if t.number == baseline), None)
    return StudyData(tuple(trials), OBJECTIVES, noise_of(trials, PLATFORM), base, DEFAULTS)


def full_factorial(rng: np.random.Generator, sd: float = 0.05) -> list[TrialOutcome]:
    grid = itertools.product([False, True], [0, 2], ["a", "b", "c"])
    return [make(i, p, world(p), rng=rng, sd=sd)
            for i, p in enumerate(dict(zip(("mtp", "level", "noop"), v, strict=True)) for v in grid)]


def test_pareto_front_and_knee_over_any_costs():
    points = {"a": (1.0, 5.0), "b": (2.0, 2.0), "c": (5.0, 1.0), "d": (3.0, 3.0)}
    front = pareto_front(list(points), lambda k: points[k])
    assert front == ["a", "b", "c"]
    assert knee(front, lambda k: points[k]) == "b"


def test_pooled_noise_recovers_the_true_log_sd():
    rng = np.random.default_rng(1)
    groups = [list(100 * np.exp(rng.normal(0, 0.1, 3))) for _ in range(200)]
    noise = pooled_noise({"x": groups}).of("x")
    assert noise.log_sd == pytest.approx(0.1, rel=0.1) and noise.df == 400
    assert pooled_noise({}).of("mean_ttft_ms").assumed


def test_intervals_of_a_difference_cover_the_truth_about_95_percent_of_the_time():
    rng = np.random.default_rng(2)
    covered = 0
    for _ in range(400):
        a, b = 100 * np.exp(rng.normal(0, 0.1, 3)), 110 * np.exp(rng.normal(0, 0.1, 3))
        noise = pooled_noise({"m": [list(a), list(b)]}).of("m")
        change = compare(estimate(list(b), noise), estimate(list(a), noise))
        covered += change.low_pct <= 10.0 <= change.high_pct
    assert 0.90 <= covered / 400 <= 0.99


def test_a_difference_smaller_than_the_noise_is_a_tie_and_a_large_one_is_not():
    noise = Noise(0.10, 10, "test")
    assert not compare(estimate([104.0, 103.0], noise), estimate([100.0, 101.0], noise)).significant
    assert compare(estimate([150.0, 152.0], noise), estimate([100.0, 101.0], noise)).significant


def test_the_front_is_interactive_latency_against_throughput_under_load():
    rng = np.random.default_rng(3)
    data = study_of(full_factorial(rng, sd=0.01))
    front = data.front()
    # MTP wins the low-concurrency latency, no MTP the high-concurrency throughput: both ends.
    assert {t.params["mtp"] for t in front} == {True, False}
    assert front and all(t.params["level"] == 2 for t in front)


def test_recommendations_pick_each_use_and_never_separate_what_does_nothing():
    rng = np.random.default_rng(4)
    data = study_of(full_factorial(rng, sd=0.01))
    assert recommend(data, "interactive").trial.params["mtp"] is True
    throughput = recommend(data, "throughput")
    assert throughput.trial.params["mtp"] is False
    # noop=a/b/c do nothing: never separated from the pick; one deployment each, at the GPU's
    # assumed 1% between deployments (issue #40: measured 0.6-0.8%) they are equivalent within
    # the smallest difference (5%); at 3% they were undecided (test_stats: wide noise never is)
    twins = [r for r in throughput.rivals if r.trial.params["mtp"] is False
             and r.trial.params["level"] == 2]
    assert {r.verdict for r in twins} == {Verdict.EQUIVALENT}
    assert "Equivalent to it" in throughput.reason


def test_uses_are_named_by_the_profiles_concurrency_not_by_the_order_of_the_objectives():
    rng = np.random.default_rng(4)
    trials = full_factorial(rng, sd=0.01)
    loads = {"low-concurrency": 2.0, "high-concurrency": 100.0}
    given = StudyData(tuple(trials), OBJECTIVES, noise_of(trials, PLATFORM), None, DEFAULTS, loads)
    flipped = StudyData(tuple(trials), OBJECTIVES[::-1], noise_of(trials, PLATFORM), None, DEFAULTS, loads)
    for use in ("interactive", "throughput"):
        assert given.objective_for(use) == flipped.objective_for(use)
        assert recommend(given, use).trial.number == recommend(flipped, use).trial.number
    assert flipped.objective_for("interactive").profile == "low-concurrency"
    assert recommend(flipped, "interactive").trial.params["mtp"] is True


def test_a_lone_feasible_trial_is_recommended_without_a_claim_beyond_the_noise():
    rng = np.random.default_rng(4)
    only = [make(0, {"mtp": False, "level": 2, "noop": "a"}, world({"mtp": False, "level": 2}), rng=rng)]
    reason = recommend(study_of(only), "interactive").reason
    assert "only feasible trial" in reason and "beyond the noise" not in reason.replace(
        "nothing is claimed beyond the noise", "")


def test_a_parameter_that_does_nothing_comes_out_as_no_effect_and_real_ones_with_their_sign():
    rng = np.random.default_rng(5)
    found = effects(study_of(full_factorial(rng), baseline=None), "output_throughput")
    by = {(e.param, e.value, e.profile): e for e in found}
    for value in ("b", "c"):
        for profile in ("low-concurrency", "high-concurrency"):
            e = by[("noop", value, profile)]
            assert e.change is not None and not e.change.significant, e.verdict
            assert e.verdict.startswith("no effect detected")
    assert by[("mtp", "True", "low-concurrency")].change.low_pct > 0
    assert by[("mtp", "True", "high-concurrency")].change.high_pct < 0
    level = by[("level", "0", "low-concurrency")].change
    assert level.low_pct <= -50 <= level.high_pct


def test_the_sign_flip_is_claimed_only_when_both_intervals_exclude_zero():
    rng = np.random.default_rng(6)
    flips, _ = sign_flips(effects(study_of(full_factorial(rng)), "output_throughput"))
    assert [(f.param, f.value) for f in flips] == [("mtp", "True")]
    noisy = full_factorial(np.random.default_rng(7), sd=0.6)
    flips, unconfirmed = sign_flips(effects(study_of(noisy), "output_throughput"))
    assert ("mtp", "True") not in [(f.param, f.value) for f in flips]


def test_matched_pairs_give_the_effect_when_a_model_cannot():
    rng = np.random.default_rng(8)
    base = {"mtp": True, "level": 3, "noop": "a"}
    trials = [make(0, base, world(base), rng=rng, sd=0.02, reference="baseline")]
    for i, change in enumerate(({"mtp": False}, {"level": 0}), start=1):
        p = {**base, **change}
        trials.append(make(i, p, world(p), rng=rng, sd=0.02, reference=f"one-change-{i}"))
    by = {(e.param, e.profile): e for e in effects(study_of(trials), "output_throughput")}
    mtp_off = by[("mtp", "low-concurrency")]
    assert mtp_off.method == "1 matched pair" and mtp_off.change.significant
    assert -35 < mtp_off.change.pct < -10 and mtp_off.change.high_pct < 0  # truth: 1/1.3 - 1


def test_effects_are_withheld_when_the_trials_cannot_separate_the_parameters():
    rng = np.random.default_rng(9)
    trials = [make(i, p, world(p), rng=rng) for i, p in enumerate([
        {"mtp": False, "level": 2, "noop": "a"}, {"mtp": True, "level": 0, "noop": "b"}])]
    found = effects(study_of(trials, baseline=None), "output_throughput")
    assert found and all(e.change is None and "cannot separate" in e.withheld for e in found)


def test_finalists_are_spread_along_the_front_and_include_the_baseline():
    rng = np.random.default_rng(10)
    trials = full_factorial(rng, sd=0.01)
    data = study_of(trials, baseline=6)  # mtp=True, level=0: never on the front
    chosen = finalists(data, 2)
    front = data.front()
    assert [t.number for t in chosen[:2]] == [front[0].number, front[-1].number]
    assert chosen[-1].number == 6




# Trials searched once (the default --repeats 1): each a single deployment whose level differs from
# the configuration's truth by the CPU's spread between deployments, as the assumed prior says.
def searched_once(rng: np.random.Generator, between: float) -> list[TrialOutcome]:
    grid = itertools.product([False, True], [0, 2], ["a", "b", "c"])
    trials = []
    for i, values in enumerate(grid):
        params = dict(zip(("mtp", "level", "noop"), values, strict=True))
        trials.append(make(i, params, world(params), rng=rng, sd=between, repeats=1))
    return trials


def test_a_parameter_that_does_nothing_comes_out_as_no_effect_at_the_expected_rate_from_single_deployments():
    rng = np.random.default_rng(11)
    seeds, false, found, total = 200, 0, 0, 0
    between = 0.20  # the CPU build's assumed spread between deployments, here the truth
    for _ in range(seeds):
        trials = searched_once(rng, between)
        data = StudyData(tuple(trials), OBJECTIVES, noise_of(trials, "cpu"), None, DEFAULTS)
        assert data.noise.of("low-concurrency:output_throughput").assumed
        for e in effects(data, "output_throughput"):
            if e.param == "noop" and e.profile == "low-concurrency":
                total += 1
                false += e.change is not None and e.change.significant
            if e.param == "level" and e.profile == "low-concurrency":
                found += e.change is not None and e.change.significant and e.change.sign < 0
    assert false / total <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / total)
    assert found / seeds >= 0.9  # level 0 halves throughput: found, with its sign
