"""The report: what it finds (the ``Report`` record) and how it says it, from a study's data."""

from __future__ import annotations

import dataclasses

from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.trial.capacity_search import Boundary, CapacitySearch
from autotune.core.trial.objectives import default_objectives
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.workload.profiles import WorkloadProfile
from autotune.study.report_data import Report, capacity_curves, ttft_buckets
from autotune.study.report_render import ttft_by_length_sections

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
                  confirmed=frozenset(), recommendations=(), importance={}, effects=(), flips=(),
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
