"""Progress lines and numbers as every table writes them: one numbering (#N, as tables name
trials), one clock (a `run`'s elapsed time runs on through its confirmation), one number
format."""

from __future__ import annotations

import re
import time

import pytest

from autotune.core.maths.numbers import number_text
from autotune.core.maths.stats import Estimate, Noise
from autotune.core.trial.outcome import TrialOutcome


def test_a_trial_is_named_by_its_number_with_how_far_the_study_is():
    from autotune.study.output.progress import ProgressLines

    lines: list[str] = []
    progress = ProgressLines(lines.append)
    progress.phase(3, 5, "benchmarking low-concurrency", trial=2)
    progress.trial_done(3, 5, TrialOutcome(2, startup_s=75.0), [0, 2])
    assert lines[0].endswith("] trial #2 (3 of 5): benchmarking low-concurrency")
    assert "] trial #2 (3 of 5): ready in 75 s" in lines[1]
    assert not any(re.search(r"\d+/\d+", line) for line in lines)  # no second numbering


def test_the_clock_runs_on_from_the_start_it_is_given():
    from autotune.study.output.progress import ProgressLines

    lines: list[str] = []
    ProgressLines(lines.append, started=time.time() - 3725).message("confirmation begins")
    assert lines[0].startswith("[1:02:0")  # 1 h 2 min 5 s, not [0:00:00]


@pytest.mark.parametrize(("value", "scale", "text"), [
    (1234.5, None, "1,234"), (12.34, None, "12.3"), (0.01234, None, "0.0123"),
    (0.5, None, "0.500"), (95.2, 120.0, "95"), (1003.0, 950.0, "1,003"), (0.0, None, "0.0"),
    (float("inf"), None, "inf")], ids=lambda v: str(v))
def test_numbers_are_written_one_way(value, scale, text):
    assert number_text(value, scale) == text


def test_an_interval_writes_its_bounds_with_its_means_digits_and_thousands_separators():
    e = Estimate(1000.0, 1, Noise(0.03, float("inf"), "assumed"))
    assert re.fullmatch(r"1,000 \[9\d\d, 1,0\d\d\]", e.text)
