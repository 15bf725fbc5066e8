"""Better, worse, equivalent or undecided: one rule for every comparison, checked on synthetic
trials whose true difference and noise are known. Not separated is never equal; the simpler
configuration wins only among equivalents; an answer is read against the baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.core.analysis.recommendation import TieSettings, recommend, searched, table
from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.maths.stats import Noise, Verdict, combined, estimate, judge
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import ProfileResult, TrialOutcome

LOW, HIGH = "low-concurrency", "high-concurrency"
E2EL = Objective(LOW, "mean_e2el_ms", "minimize")
TPUT = Objective(HIGH, "output_throughput", "maximize")
MARGIN = 0.05
SIMULATIONS = 400


def est(mean: float, n: int, sd: float, df: float = 20) -> object:
    return estimate([mean] * n, Noise(sd, df, "synthetic"))


@pytest.mark.parametrize("a, b, sd, n, minimize, expected", [
    (1000, 1000, 0.01, 3, True, Verdict.EQUIVALENT),
    (900, 1000, 0.01, 3, True, Verdict.BETTER),
    (1100, 1000, 0.01, 3, True, Verdict.WORSE),
    (1100, 1000, 0.01, 3, False, Verdict.BETTER),
    (1000, 1000, 0.20, 1, True, Verdict.UNDECIDED),
    (1030, 1000, 0.05, 1, True, Verdict.UNDECIDED),
    (1010, 1000, 0.002, 10, True, Verdict.EQUIVALENT),  # real, but smaller than what matters
], ids=["same-quiet", "10%-faster", "10%-slower", "10%-more-throughput", "same-noisy",
        "3%-noisy", "1%-real-but-small"])
def test_the_rule_on_known_differences(a, b, sd, n, minimize, expected):
    assert judge(est(a, n, sd), est(b, n, sd), margin=MARGIN, minimize=minimize).verdict is expected


def test_equivalence_is_judged_on_the_90_percent_interval_and_difference_on_the_95():
    # a difference of 0 whose 95% interval reaches past the margin but whose 90% one does not
    a, b = est(1000, 2, 0.0245, math.inf), est(1000, 2, 0.0245, math.inf)
    c = judge(a, b, margin=MARGIN, minimize=True)
    assert c.change.high_pct > 4.7 and c.tost.high_pct < 5.0
    assert c.verdict is Verdict.EQUIVALENT


def test_verdicts_combine_over_objectives():
    B, W, E, U = Verdict.BETTER, Verdict.WORSE, Verdict.EQUIVALENT, Verdict.UNDECIDED
    assert combined([E, E]) is E
    assert combined([B, E]) is B and combined([W, E]) is W
    assert combined([B, W]) is U  # a trade-off is no verdict for the use
    assert combined([E, U]) is U
    assert combined([W, U]) is W and combined([B, U]) is B  # cannot come out ahead / behind on all


def _trial(number: int, truth: tuple[float, float], deployments: int, sd: float,
           rng: np.random.Generator, params: dict | None = None, reference: str = "") -> TrialOutcome:
    results = {}
    for profile, metric, value in ((LOW, E2EL.metric, truth[0]), (HIGH, TPUT.metric, truth[1])):
        values = value * np.exp(rng.normal(0, sd, deployments))
        results[profile] = ProfileResult(profile, tuple({metric: float(v)} for v in values),
                                         deployment_sizes=(1,) * deployments)
    return TrialOutcome(number, params=params if params is not None else {"x": number},
                        results=results, reference=reference)


def _study(trials: list[TrialOutcome], baseline: TrialOutcome | None = None) -> StudyData:
    return StudyData(tuple(trials), (E2EL, TPUT), noise_of(trials, "gpu"), baseline,
                     {"x": 0, "y": 0}, smallest_difference=MARGIN)


def _bystanders(rng: np.random.Generator, sd: float, count: int = 6) -> list[TrialOutcome]:
    """Slower trials deployed 4 times each, which measure the noise between deployments."""
    return [_trial(100 + i, (3000.0, 300.0), 4, sd, rng, {"x": 100 + i, "y": 1})
            for i in range(count)]


def test_identical_configurations_come_out_equivalent_once_the_noise_allows():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(50):
        twins = [_trial(n, (1000.0, 6000.0), 3, 0.01, rng, {"x": 1, "y": n}) for n in (0, 1)]
        data = _study(twins + _bystanders(rng, 0.01))
        rec = recommend(data, "interactive")
        rival = next(r for r in rec.rivals if r.trial.number in (0, 1))
        hits += rival.verdict is Verdict.EQUIVALENT
    assert hits >= 45


def test_a_ten_percent_better_configuration_comes_out_better():
    rng = np.random.default_rng(2)
    base = _trial(0, (1000.0, 6000.0), 2, 0.01, rng, {"x": 0, "y": 0}, reference="baseline")
    better = _trial(1, (900.0, 6600.0), 2, 0.01, rng, {"x": 1, "y": 0})
    data = _study([base, better, *_bystanders(rng, 0.01)], baseline=base)
    for use in ("interactive", "throughput", "balanced"):
        rec = recommend(data, use)
        assert rec.trial.number == 1
        assert rec.versus is not None and rec.versus.verdict is Verdict.BETTER


def test_with_wide_noise_the_answer_is_undecided_never_equivalent():
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(SIMULATIONS // 4):
        pair = [_trial(n, (1000.0, 6000.0), 1, 0.2, rng, {"x": n, "y": 0}) for n in (0, 1)]
        data = _study(pair + _bystanders(rng, 0.2, count=2))
        rival = next(r for r in recommend(data, "interactive").rivals if r.trial.number in (0, 1))
        seen.add(rival.verdict)
    assert Verdict.EQUIVALENT not in seen
    assert Verdict.UNDECIDED in seen


def test_among_undecided_rivals_the_better_estimate_wins_not_the_simpler():
    rng = np.random.default_rng(4)
    simple = _trial(0, (1000.0, 6000.0), 1, 0.06, rng, {"x": 0, "y": 0})
    changed = _trial(1, (1000.0, 6000.0), 1, 0.06, rng, {"x": 5, "y": 5})
    # known estimates: the changed one measured 6% more throughput, inside a wide noise
    simple = _with(simple, HIGH, TPUT.metric, 6000.0)
    changed = _with(changed, HIGH, TPUT.metric, 6360.0)
    data = _study([simple, changed, *_bystanders(rng, 0.06, count=3)])
    rec = recommend(data, "throughput", TieSettings("s", MARGIN))
    assert rec.trial.number == 1
    assert [r.trial.number for r in rec.of(Verdict.UNDECIDED)] == [0]
    assert rec.tie_cost is not None and rec.tie_cost.rounds > 0


def test_among_equivalents_the_configuration_closest_to_the_baseline_wins():
    rng = np.random.default_rng(5)
    base = _trial(0, (1000.0, 6000.0), 3, 0.005, rng, {"x": 0, "y": 0}, reference="baseline")
    tweak = _trial(1, (995.0, 6010.0), 3, 0.005, rng, {"x": 1, "y": 1})
    data = _study([base, tweak, *_bystanders(rng, 0.005)], baseline=base)
    rec = recommend(data, "interactive")
    assert rec.trial.number == 0 and rec.keep
    assert [r.trial.number for r in rec.of(Verdict.EQUIVALENT)] == [1]


def test_a_baseline_only_study_says_keep_what_you_run():
    rng = np.random.default_rng(6)
    base = _trial(0, (1000.0, 6000.0), 1, 0.01, rng, {"x": 0, "y": 0}, reference="baseline")
    data = _study([base], baseline=base)
    recs = [recommend(data, use, TieSettings("s", MARGIN)) for use in ("interactive", "throughput",
                                                                       "balanced")]
    assert all(r.keep for r in recs)
    lines = table(data, recs, "s")
    said = " ".join(" ".join(lines).split())
    # "keep" never reads as a search result: it says that nothing was searched
    assert ("keep what you run (#0 baseline): 1 configuration measured, nothing searched: no "
            "configuration beyond the baseline was measured") in said
    assert "nothing measured is better" not in said
    assert all("1 configuration measured, nothing searched" in r.reason for r in recs)
    assert all(len(line) <= 80 for line in lines)


def test_a_study_that_searched_says_how_many_configurations_it_measured():
    rng = np.random.default_rng(6)
    base = _trial(0, (1000.0, 6000.0), 1, 0.01, rng, {"x": 0, "y": 0}, reference="baseline")
    again = _trial(1, (1000.0, 6000.0), 1, 0.01, rng, {"x": 0, "y": 0})  # deployed again: counts once
    data = _study([base, again, *_bystanders(rng, 0.01, count=3)], baseline=base)
    found = searched(data)
    assert (found.measured, found.searched, found.failed) == (4, 3, 0)
    lines = table(data, [recommend(data, "interactive", TieSettings("s", MARGIN))], "s")
    assert "searched: 4 configurations measured, 3 searched beyond the baseline" in " ".join(
        " ".join(lines).split())


def test_the_table_names_undecided_rivals_with_their_signed_difference_and_price():
    rng = np.random.default_rng(7)
    a = _with(_trial(0, (1000.0, 6000.0), 1, 0.03, rng, {"x": 0, "y": 0}), HIGH, TPUT.metric, 6000.0)
    b = _with(_trial(1, (1000.0, 6000.0), 1, 0.03, rng, {"x": 1, "y": 0}), HIGH, TPUT.metric, 6384.0)
    data = _study([a, b, *_bystanders(rng, 0.03, count=3)], baseline=a)
    data = StudyData(data.outcomes, data.objectives, data.noise, a, data.defaults,
                     smallest_difference=MARGIN, deployment_s=100.0)
    recs = [recommend(data, "throughput", TieSettings("s", MARGIN))]
    text = "\n".join(table(data, recs, "s"))
    # the pick's change against the rival (6,384 against 6,000 tok/s: +6.4%), the sign the
    # pick's change against the baseline has in the row above
    assert "throughput: #1 is undecided against #0 (+6.4%); deciding them: ~" in text
    assert "vs #0" in text and "undecided +6.4%" in text
    assert f"{TPUT.label}: measured, 9 df" in " ".join(text.split())  # 12 deployments, 3 trials


def _with(t: TrialOutcome, profile: str, metric: str, value: float) -> TrialOutcome:
    import dataclasses
    r = t.results[profile]
    return dataclasses.replace(t, results={**t.results, profile: ProfileResult(
        profile, tuple({metric: value} for _ in r.runs), deployment_sizes=r.deployment_sizes)})
