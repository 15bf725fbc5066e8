"""A run's expected length (`run --dry-run`): trials in waves over the slots, the calibration
and the confirmation one at a time, at a measured cost or the platform's prior, capped by the
time budget; the line says where the cost comes from."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.core.maths.platforms import PLATFORMS
from autotune.core.plan.budget import expected_trial_s
from autotune.core.plan.estimate import DeploymentCost, RunEstimate, assumed_cost, measured_cost
from tests.helpers import PHASES, failed, served

COST = DeploymentCost(trial_s=100.0, again_s=60.0, startup_s=None, source="test")


@pytest.mark.parametrize(("trials", "slots", "expected_s"), [
    (10, 1, 10 * 100 + 1 * 60 + 8 * 60),   # every trial one after another
    (10, 4, 3 * 100 + 1 * 60 + 8 * 60),    # waves of 4: 4, 4, 2
    (0, 1, 1 * 60 + 8 * 60),               # trials done: calibration and confirmation left
], ids=["one-slot", "four-slots", "none-left"])
def test_trials_run_in_waves_over_the_slots_and_redeployments_one_at_a_time(trials, slots, expected_s):
    e = RunEstimate(trials=trials, slots=slots, calibration=1, confirmation=8, budget_s=None,
                    cost=COST)
    assert e.total_s == expected_s


def test_the_time_budget_caps_the_estimate_and_the_line_says_so():
    e = RunEstimate(trials=10, slots=1, calibration=0, confirmation=0, budget_s=600.0, cost=COST)
    assert e.total_s == 600.0
    assert e.text == ("estimated length: about 10 min: 10 trials x ~1 min 40 s on 1 slot; capped "
                      "by the time budget (test)")


def test_a_time_budget_alone_decides_and_says_how_many_trials_fit():
    e = RunEstimate(trials=None, slots=2, calibration=1, confirmation=4, budget_s=1000.0, cost=COST)
    assert e.total_s == 1000.0
    assert "the time budget decides: about 20 trials of ~1 min 40 s on 2 slots fit" in e.text


def test_the_measured_cost_is_the_budgets_next_trial_and_says_how_many():
    walls = [dataclasses.replace(served(e2el_ms=1000, throughput=2000), number=n, trial_wall_s=w)
             for n, w in ((0, 100.0), (1, 120.0))]
    crashed = dataclasses.replace(failed("boom"), trial_wall_s=30.0)  # served trials only
    cost = measured_cost([*walls, crashed], "of this study")
    compile_s = PHASES["compile_s"]  # a miss: a redeployment finds its graphs compiled
    source = ("measured: 2 served trials of this study, priced as the time budget prices the "
              "next (the first deployment's cold start excluded)")
    # the trial after the first: its start (75 s) and the rest of it (45 s)
    assert cost == DeploymentCost(120.0, 110.0 - compile_s, 75.0, source)
    line = RunEstimate(trials=3, slots=1, calibration=1, confirmation=0, budget_s=None,
                       cost=cost).text
    assert line == ("estimated length: about 7 min 21 s: 3 trials x ~2 min on 1 slot, 1 "
                    f"calibration redeployment ({source}, start-up ~1 min 15 s of a trial)")


def test_the_dry_run_prices_a_trial_as_the_time_budget_does():
    """Issue #46: a cold 134 s first trial priced the 59 s ones after it. The dry run's cost
    of a trial is the budget's (``expected_trial_s``): 59 s, not the 84 s mean wall."""
    first = dataclasses.replace(served(e2el_ms=1000, throughput=2000), number=0,
                                trial_wall_s=134.0, startup_s=53.0,
                                startup_phases={"jit_s": 23.0})
    later = [dataclasses.replace(first, number=n, trial_wall_s=59.0, startup_s=30.0,
                                 startup_phases={}) for n in (1, 2, 3)]
    trials = [first, *later]
    cost = measured_cost(trials, "of this study")
    assert cost.trial_s == expected_trial_s(trials) == 59.0
    assert cost.startup_s == 30.0


def test_nothing_measured_is_the_platforms_prior_said_as_assumed():
    assert measured_cost([failed("boom")], "of this study") is None
    cost = assumed_cost("cpu")
    assert (cost.trial_s, cost.again_s, cost.startup_s) == (90.0, 90.0, None)
    assert cost.source == "assumed: nothing measured yet, the CPU build prior of ~1 min 30 s a trial"
    gpu = assumed_cost("gpu")  # a redeployment finds its compiled graphs cached: cheaper
    assert (gpu.trial_s, gpu.again_s) == (PLATFORMS["gpu"].trial_s, PLATFORMS["gpu"].redeploy_s) == (120.0, 100.0)
