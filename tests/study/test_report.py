"""The report: what it finds (the ``Report`` record) and how it says it, from a study's data."""

from __future__ import annotations

import dataclasses

from autotune.core.analysis.recommendation import USES, TieSettings, recommend
from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.trial.capacity_search import Boundary, CapacitySearch
from autotune.core.trial.objectives import Objective, default_objectives
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.workload.profiles import WorkloadProfile
from autotune.study.output.report_data import Report, capacity_curves, recommendations, ttft_buckets
from autotune.study.output.report_render import report_sections, to_html, to_markdown, ttft_by_length_sections

PROFILE = WorkloadProfile(name="chat")
SHORT, LONG = "median_ttft_ms_prompt_0_256", "median_ttft_ms_prompt_1024_4096"


def trial(n: int, short_ms: float, long_ms: float | None) -> TrialOutcome:
    run = {"mean_ttft_ms": 50.0, "mean_tpot_ms": 5.0 + n, SHORT: short_ms}
    if long_ms is not None:
        run[LONG] = long_ms
    return TrialOutcome(n, results={"chat": ProfileResult("chat", (run, run))})


def data_of(trials: list[TrialOutcome]) -> StudyData:
    return StudyData(tuple(trials), default_objectives((PROFILE,)), noise_of(trials))


def report_of(data: StudyData) -> Report:
    """A report holding ``data`` and what ``compute_report`` derives from it alone."""
    return Report(study_name="s", model="m", space_path="space.yaml", data=data,
                  recommendations=recommendations(data, TieSettings("s")), importance={},
                  effects=(), flips=(),
                  unconfirmed_flips=(), ttft_buckets=ttft_buckets(data),
                  capacity_curves=capacity_curves(data))


def test_ttft_by_prompt_length_covers_the_profiles_whose_prompts_span_buckets():
    assert ttft_buckets(data_of([trial(0, 10.0, 300.0), trial(1, 12.0, 150.0)])) == {"chat": (SHORT, LONG)}


def test_no_ttft_by_length_when_every_prompt_is_in_one_bucket():
    assert ttft_buckets(data_of([trial(0, 10.0, None), trial(1, 12.0, None)])) == {}


def test_the_ttft_by_length_section_shows_the_front_per_bucket():
    data = data_of([trial(0, 10.0, 300.0), trial(1, 12.0, 150.0)])
    (section,) = ttft_by_length_sections(report_of(data))
    head, rows = section.tables[0]
    assert head == ["trial", "0-256 tokens", "1024-4096 tokens"]
    assert [row[0] for row in rows] == [t.label for t in data.front()] and rows[0][2].startswith("300")


def test_a_capacity_plot_shows_the_fronts_searches_else_the_first_six_that_searched():
    found = CapacitySearch("cap", "concurrency", ("p99_ttft_ms<=2000",), Boundary(8, 16, 10, "", 4))
    trials = [trial(0, 10.0, None)] + [dataclasses.replace(trial(n, 10.0, None), capacity={"cap": found})
                                       for n in range(1, 9)]
    assert [t.number for t in data_of(trials).front()] == [0]  # the front did not search "cap"
    assert capacity_curves(data_of(trials)) == {"cap": {t.label: found for t in trials[1:7]}}
    trials[0] = dataclasses.replace(trials[0], capacity={"cap": found})
    assert capacity_curves(data_of(trials)) == {"cap": {trials[0].label: found}}


def throughput_study(*runs: tuple[float, ...]) -> StudyData:
    """One trial per ``runs`` (output throughput at high concurrency, two runs a deployment)."""
    trials = [TrialOutcome(n, params={"x": n}, results={"high-concurrency": ProfileResult(
        "high-concurrency", tuple({"output_throughput": v} for v in values))})
        for n, values in enumerate(runs)]
    return StudyData(tuple(trials), (Objective("high-concurrency", "output_throughput", "maximize"),),
                     noise_of(trials), None, {"x": 0}, repeats=2)


TIED = throughput_study((1000.0, 1040.0), (1010.0, 1030.0), (500.0, 505.0))
APART = throughput_study((1000.0, 1010.0), (2000.0, 2010.0))


def test_the_report_says_what_each_tie_would_cost_to_resolve_as_recommend_does():
    costs = [recommend(TIED, use, TieSettings("s")).tie_cost for use in USES]
    assert all(costs) and len({c.text for c in costs if c}) == 1  # one objective: one tie
    sections = report_sections(report_of(TIED))
    md, page = to_markdown(sections), to_html(sections)
    for use, cost in zip(USES, costs, strict=True):
        assert cost is not None
        assert f"**{use}**: " in md and cost.text.strip() in md
        assert f"{cost.rounds} more confirmation round{'' if cost.rounds == 1 else 's'}" in page
        assert f"<code>{cost.command}</code>" in page


def test_a_report_without_a_tie_says_no_cost():
    assert all(recommend(APART, use, TieSettings("s")).tie_cost is None for use in USES)
    md = to_markdown(report_sections(report_of(APART)))
    assert "beyond the noise" in md and "To resolve the tie" not in md and "separated none" not in md


def test_the_study_note_says_the_same_cost_of_each_tie_and_none_without_one():
    from autotune.study.output.notes import study_note

    note = study_note("s", TIED)
    costs = [recommend(TIED, use, TieSettings("s")).tie_cost for use in USES]
    assert all(c is not None and c.text.strip() in note for c in costs)
    assert "To resolve the tie" not in study_note("s", APART)
    # `run --smallest-difference 10%` (stored in the plan): the note states the cost at 10%.
    wide = [recommend(TIED, use, TieSettings("s", 0.10)).tie_cost for use in USES]
    assert all(c is not None and "10%" in c.text and c.text.strip() in study_note("s", TIED, 0.10)
               for c in wide)
    assert {c.rounds for c in wide if c} != {c.rounds for c in costs if c}
