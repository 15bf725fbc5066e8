"""What the sampler is told of a measured trial (core.trial.sampler_feedback)."""

from __future__ import annotations

import math

import pytest

from autotune.core.deployment import failures
from autotune.core.metrics.slo import parse_slo
from autotune.core.trial.objectives import default_objectives
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.trial.sampler_feedback import FEASIBLE, what_to_tell
from autotune.core.workload.profiles import get_profile

PROFILES = (get_profile("low-concurrency"), get_profile("high-concurrency"))
OBJECTIVES = default_objectives(PROFILES)
SLO = parse_slo("high-concurrency:p99_ttft_ms<=5000", [p.name for p in PROFILES])


def served(p99_ttft_ms: float) -> TrialOutcome:
    runs = {"low-concurrency": ({"mean_e2el_ms": 900.0, "output_throughput": 200.0},
                                {"mean_e2el_ms": 1100.0, "output_throughput": 220.0}),
            "high-concurrency": ({"output_throughput": 1700.0, "p99_ttft_ms": p99_ttft_ms},)}
    return TrialOutcome(3, results={p: ProfileResult(p, r) for p, r in runs.items()})


def test_a_served_trial_within_its_slo_is_told_its_means_and_how_far_from_the_limit():
    verdict = what_to_tell(served(4000.0), OBJECTIVES, [SLO], [])
    assert verdict.values == [1000.0, 1700.0]
    assert verdict.constraints == {FEASIBLE: 0.0, SLO.key: -1000.0}
    assert verdict.outcome.feasible and verdict.outcome.slo_violations == {SLO.key: -1000.0}


def test_a_trial_past_its_slo_is_infeasible_with_its_measured_values():
    verdict = what_to_tell(served(6000.0), OBJECTIVES, [SLO], [])
    assert verdict.outcome.failure is failures.SLO_VIOLATED and not verdict.outcome.feasible
    assert verdict.constraints[SLO.key] == 1000.0 and verdict.values == [1000.0, 1700.0]


@pytest.mark.parametrize("failure", [failures.HOST_FAULT, failures.INTERNAL_ERROR, failures.INTERRUPTED],
                         ids=["the-machines", "ours", "the-users"])
def test_a_failure_that_is_not_the_configurations_tells_the_sampler_nothing(failure):
    verdict = what_to_tell(TrialOutcome(4, failure=failure), OBJECTIVES, [SLO], ["capacity"])
    assert (verdict.values, verdict.constraints) == (None, {})


def test_a_failed_trial_is_told_it_served_nothing():
    failed = TrialOutcome(4, failure=failures.ENGINE_DIED)
    verdict = what_to_tell(failed, OBJECTIVES, [SLO], ["capacity"])
    assert verdict.values == [math.inf, 0.0]
    assert verdict.constraints == {FEASIBLE: 1.0, SLO.key: 1.0, "capacity:capacity": 1.0}
