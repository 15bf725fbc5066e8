"""Settling a capacity probe's fail early (``core.trial.early_fail``): on synthetic runs whose
per-request latencies are drawn from known distributions, a run stopped once the count says
its fail is settled gets the verdict the whole run gets, every time, and stops after a small
part of its requests where the load is clearly past its limit. Pure: no server."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.core.metrics.slo import Slo
from autotune.core.metrics.summary import RequestResult, flat_metrics, summarize
from autotune.core.trial.capacity_search import LoadOutcome, Z, judge_load
from autotune.core.trial.early_fail import fail_rule
from autotune.core.workload.capacity_spec import CapacitySpec

LIMITS = (Slo("p99_tpot_ms", "<=", 100.0), Slo("median_ttft_ms", "<=", 1000.0),
          Slo("p90_e2el_ms", "<=", 4000.0))


def request(rng: np.random.Generator, *, tpot_ms: float, ttft_ms: float, sd: float,
            tokens: int = 32) -> RequestResult:
    """One request whose TPOT and TTFT are log-normal around the given medians."""
    tpot = tpot_ms * np.exp(rng.normal(0, sd)) / 1000
    ttft = ttft_ms * np.exp(rng.normal(0, sd)) / 1000
    return RequestResult(prompt_len=8, start_s=0.0, success=True, output_tokens=tokens,
                         ttft_s=ttft, latency_s=ttft + tpot * (tokens - 1))


def stopped_at(rule, results, planned):
    """How many requests a client asking ``rule`` after each completion measures (0: all)."""
    return next((k for k in range(1, len(results) + 1) if rule.settled(results[:k], planned)), 0)


def test_a_settled_fail_is_the_whole_runs_verdict_in_every_synthetic_run():
    spec = CapacitySpec(limits=LIMITS)
    rule = fail_rule(spec.limits, Z * spec.noise)
    rng = np.random.default_rng(0)
    stopped = 0
    for _ in range(500):
        planned = int(rng.integers(4, 200))
        # Medians from far below to far above the limits, spreads from tight to wide.
        scale, sd = float(np.exp(rng.uniform(-1.5, 1.5))), float(rng.uniform(0.02, 1.0))
        results = [request(rng, tpot_ms=100 * scale, ttft_ms=1000 * scale, sd=sd)
                   for _ in range(planned)]
        whole = judge_load(spec, 1, [flat_metrics(summarize(results, 1.0))])
        k = stopped_at(rule, results, planned)
        if k:
            stopped += 1
            part = judge_load(spec, 1, [flat_metrics(summarize(results[:k], 1.0))])
            assert (whole.verdict, whole.sure) == (part.verdict, part.sure) == (LoadOutcome.FAIL, True)
    assert stopped > 100  # the property was put to the test


@pytest.mark.parametrize("over", [1.5, 2.0, 4.0], ids=["1.5x", "2x", "4x"])
def test_a_load_clearly_past_its_limit_is_settled_after_a_few_of_its_requests(over):
    spec = CapacitySpec(limits=(Slo("p99_tpot_ms", "<=", 100.0),))
    rule = fail_rule(spec.limits, Z * spec.noise)
    rng = np.random.default_rng(1)
    fractions = []
    for _ in range(200):
        results = [request(rng, tpot_ms=100 * over, ttft_ms=10, sd=0.2) for _ in range(100)]
        fractions.append(stopped_at(rule, results, 100) / 100)
    # p99 of 100: two requests past limit x exp(1.96 x 0.15) = 134 ms settle it.
    assert 0 < np.median(fractions) <= 0.05


def test_a_pass_is_never_settled_early_since_a_later_request_may_fail():
    spec = CapacitySpec(limits=LIMITS)
    rng = np.random.default_rng(2)
    results = [request(rng, tpot_ms=1, ttft_ms=1, sd=0.1) for _ in range(50)]
    assert stopped_at(fail_rule(spec.limits, Z * spec.noise), results, 50) == 0


def test_a_failed_request_settles_the_fail_at_once():
    rule = fail_rule((Slo("mean_ttft_ms", "<=", 100.0),), 0.25)
    failed = RequestResult(prompt_len=8, start_s=0.0, success=False, error="timed out")
    assert rule.bars == ()  # a mean waits for the whole run
    assert rule.settled([failed], 64) == "1 failed request(s) after 1 of 64"


@pytest.mark.parametrize(("metric", "planned", "needed"), [
    ("p99_tpot_ms", 100, 2), ("p99_tpot_ms", 50, 2), ("median_ttft_ms", 100, 51),
    ("p90_e2el_ms", 64, 8)], ids=["p99-of-100", "p99-of-50", "median-of-100", "p90-of-64"])
def test_the_count_that_settles_a_fail_is_n_minus_the_percentiles_lower_index(metric, planned, needed):
    bar, = fail_rule((Slo(metric, "<=", 100.0),), 0.0).bars
    assert bar.needed(planned) == needed
