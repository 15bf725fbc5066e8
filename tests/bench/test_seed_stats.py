"""The benchmarks' statistics over seeds (benchmarks/seed_stats.py), on samples whose truth is
known."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.seed_stats import median_difference, median_interval, proportion_interval


def test_two_samplers_drawn_from_one_distribution_are_a_tie_about_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    ties = 0
    for i in range(200):
        a, b = rng.geometric(0.08, 30), rng.geometric(0.08, 30)  # trials to reach a target
        ties += median_difference(a, b, seed=i, n=1000).verdict == "tie"
    assert 0.88 <= ties / 200 <= 1.0


def test_a_sampler_that_needs_half_the_trials_is_found_below():
    rng = np.random.default_rng(4)
    fast, slow = rng.geometric(0.2, 30), rng.geometric(0.07, 30)
    d = median_difference(fast, slow)
    assert d.verdict == "below" and d.low < d.value < d.high < 0


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(5)
    true = np.log(2) / 0.1  # the median of an exponential with rate 0.1
    covered = sum(m.low <= true <= m.high for m in
                  (median_interval(rng.exponential(10, 30), seed=i, n=1000) for i in range(200)))
    assert 0.88 <= covered / 200 <= 0.99


def test_a_share_has_a_wilson_interval_that_stays_inside_0_and_1():
    assert proportion_interval(30, 30).high == pytest.approx(1.0)
    assert 0.88 < proportion_interval(30, 30).low < 0.9
    assert proportion_interval(0, 30).low == pytest.approx(0.0, abs=1e-12)
    half = proportion_interval(15, 30)
    assert half.value == 0.5 and half.low == pytest.approx(1 - half.high)
