"""The report's pure parts: what it says, from a study's data."""

from __future__ import annotations

from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.trial.objectives import default_objectives
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.workload.profiles import WorkloadProfile
from autotune.study.report import ttft_by_length_sections

PROFILE = WorkloadProfile(name="chat")


def trial(n: int, short_ms: float, long_ms: float | None) -> TrialOutcome:
    run = {"mean_ttft_ms": 50.0, "mean_tpot_ms": 5.0 + n, "median_ttft_ms_prompt_0_256": short_ms}
    if long_ms is not None:
        run["median_ttft_ms_prompt_1024_4096"] = long_ms
    return TrialOutcome(n, results={"chat": ProfileResult("chat", (run, run))})


def test_ttft_by_prompt_length_is_shown_for_the_front_where_prompts_span_buckets():
    trials = [trial(0, 10.0, 300.0), trial(1, 12.0, 150.0)]
    data = StudyData(tuple(trials), default_objectives((PROFILE,)), noise_of(trials))
    (section,) = ttft_by_length_sections(data)
    head, rows = section.tables[0]
    assert head == ["trial", "0-256 tokens", "1024-4096 tokens"]
    assert [row[0] for row in rows] == [t.label for t in data.front()] and rows[0][2].startswith("300")


def test_no_ttft_by_length_section_when_every_prompt_is_in_one_bucket():
    trials = [trial(0, 10.0, None), trial(1, 12.0, None)]
    assert ttft_by_length_sections(StudyData(tuple(trials), default_objectives((PROFILE,)),
                                             noise_of(trials))) == []
