"""Effects and the other comparisons of analysis on metrics that are 0 or missing in a run.

A hit rate, an acceptance rate or a goodput is 0 in a normal study; `autotune report` used to end
in a ZeroDivisionError (a log ratio of it). Every registered metric goes through the analysis
here with zero-valued and missing values; the metrics whose record says ``difference`` get
effects in their unit, and a ratio metric measured as 0 falls back to a difference and says so.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autotune.core.analysis.effects import effects, sign_flips
from autotune.core.analysis.recommendation import USES, recommend
from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.maths.stats import Change, Difference
from autotune.core.metrics.registry import METRICS, Scale
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import ProfileResult, TrialOutcome

PROFILES = ("low-concurrency", "high-concurrency")
GRID = [dict(zip(("mtp", "level"), v, strict=True)) for v in itertools.product((False, True), (0, 2))]


def trial(n: int, params: dict, runs: list[dict[str, float]]) -> TrialOutcome:
    return TrialOutcome(n, params=params, results={p: ProfileResult(p, tuple(runs)) for p in PROFILES})


def study(trials: list[TrialOutcome], metric: str) -> StudyData:
    objectives = tuple(Objective(p, metric, METRICS[metric].direction) for p in PROFILES)
    return StudyData(tuple(trials), objectives, noise_of(trials), trials[0], {"mtp": False, "level": 2})


def zeros_and_gaps(metric: str) -> list[TrialOutcome]:
    """Four configurations, two repeats each: all zeros, one zero, a missing run, positive."""
    runs = [[{metric: 0.0}, {metric: 0.0}], [{metric: 0.0}, {metric: 5.0}],
            [{metric: 3.0}, {"other": 1.0}], [{metric: 4.0}, {metric: 4.5}]]
    return [trial(i, p, r) for i, (p, r) in enumerate(zip(GRID, runs, strict=True))] + [
        trial(4, GRID[0], [{"other": 1.0}])]  # the metric missing from every run


@pytest.mark.parametrize("metric", list(METRICS))
def test_no_registered_metric_makes_analysis_raise_when_it_is_zero_or_missing(metric):
    data = study(zeros_and_gaps(metric), metric)
    found = effects(data, metric)
    assert found and all(e.change is not None or e.withheld for e in found)
    sign_flips(found)
    for t in data.outcomes:
        for p in PROFILES:
            if t.has(p, metric):
                assert data.estimate(t, p, metric).text
                data.versus_baseline(t, p, metric)
    data.front()
    for use in USES:
        recommend(data, use)


@pytest.mark.parametrize("metric", list(METRICS))
def test_effects_of_an_all_zero_metric_are_differences_of_zero(metric):
    data = study([trial(i, p, [{metric: 0.0}, {metric: 0.0}]) for i, p in enumerate(GRID)], metric)
    found = effects(data, metric)
    assert found
    for e in found:
        assert e.change == Difference(0.0, 0.0, 0.0, METRICS[metric].unit), e
        assert not e.change.significant


def test_rates_and_goodput_are_compared_as_differences_and_the_rest_as_ratios():
    difference = {k for k, m in METRICS.items() if m.effect_scale is Scale.DIFFERENCE}
    assert {"prefix_cache_hit_rate", "spec_decode_acceptance_rate", "request_goodput"} <= difference
    assert {"output_throughput", "mean_e2el_ms", "p99_ttft_ms"}.isdisjoint(difference)


def test_a_hit_rate_effect_is_a_difference_in_points_that_recovers_the_truth():
    """Prefix caching on: a hit rate of 40% (sd 2 points); off: 0. The effect is +40 points."""
    rng = np.random.default_rng(0)
    trials = []
    for i, params in enumerate(GRID * 2):
        truth = 40.0 if params["mtp"] else 0.0
        trials.append(trial(i, params, [{"prefix_cache_hit_rate": max(truth + rng.normal(0, 2), 0)}
                                        for _ in range(2)]))
    found = effects(study(trials, "prefix_cache_hit_rate"), "prefix_cache_hit_rate")
    mtp = [e for e in found if e.param == "mtp"]
    assert mtp and all(isinstance(e.change, Difference) and e.change.unit == "%" for e in mtp)
    assert all(e.change.low < 40.0 < e.change.high and e.change.low > 30 for e in mtp), mtp
    level = [e for e in found if e.param == "level"]
    assert all(not e.change.significant for e in level), level
    assert "as a difference" not in mtp[0].method  # declared so, nothing to explain


def test_a_ratio_metric_measured_as_zero_falls_back_to_a_difference_and_says_so():
    trials = [trial(i, p, [{"std_tpot_ms": 0.0 if p["mtp"] else 2.0}] * 2) for i, p in enumerate(GRID)]
    found = effects(study(trials, "std_tpot_ms"), "std_tpot_ms")
    mtp = next(e for e in found if e.param == "mtp")
    assert isinstance(mtp.change, Difference) and mtp.change.value == pytest.approx(-2.0)
    assert "as a difference: a trial measured it as 0" in mtp.method


def test_a_positive_ratio_metric_keeps_its_relative_change():
    trials = [trial(i, p, [{"output_throughput": 200.0 if p["mtp"] else 100.0}] * 2)
              for i, p in enumerate(GRID)]
    mtp = next(e for e in effects(study(trials, "output_throughput"), "output_throughput")
               if e.param == "mtp")
    assert isinstance(mtp.change, Change) and mtp.change.pct == pytest.approx(100.0)


def test_the_report_of_a_study_whose_hit_rate_is_zero_renders_its_effects():
    """What `autotune report` computes and writes for a normal study in which prefix caching
    found nothing (the crash of #29), as Markdown."""
    from autotune.study.output.report_data import Report, capacity_curves, effect_metrics, ttft_buckets
    from autotune.study.output.report_render import report_sections, to_markdown

    trials = [trial(i, p, [{"output_throughput": 100.0 + 10 * i, "mean_e2el_ms": 900.0 - i,
                            "prefix_cache_hit_rate": 0.0, "mean_kv_cache_usage_pct": 0.0}] * 2)
              for i, p in enumerate(GRID)]
    data = study(trials, "output_throughput")
    found = [e for m in effect_metrics(data) for e in effects(data, m)]
    assert {e.metric for e in found} >= {"prefix_cache_hit_rate", "mean_kv_cache_usage_pct"}
    flips, unconfirmed = sign_flips(found)
    report = Report(study_name="s", model="m", space_path="space.yaml", data=data,
                    recommendations=(), importance={}, effects=tuple(found),
                    flips=tuple(flips), unconfirmed_flips=tuple(unconfirmed),
                    ttft_buckets=ttft_buckets(data), capacity_curves=capacity_curves(data))
    markdown = to_markdown(report_sections(report))
    assert "prefix_cache_hit_rate" in markdown and "no effect detected (+0 pp [+0, +0])" in markdown
