"""A change and a difference: one interval logic, on the log scale and on the metric's own."""

from __future__ import annotations

import math

import pytest

from autotune.core.maths.platforms import PLATFORMS
from autotune.core.maths.stats import Change, Difference


@pytest.mark.parametrize(("d", "se", "df", "t", "significant", "sign"), [
    (0.2, 0.05, math.inf, 1.959964, True, 1.0),  # the normal quantile, excludes zero
    (-0.2, 0.05, math.inf, 1.959964, True, -1.0),
    (0.2, 0.05, 1.0, 12.706205, False, 1.0),  # one degree of freedom: the same d is a tie
    (0.0, 0.05, 4.0, 2.776445, False, 0.0),  # no difference has no sign
], ids=["up", "down", "one-df-tie", "zero"])
def test_a_change_and_a_difference_share_the_interval_its_significance_and_its_sign(
        d, se, df, t, significant, sign):
    diff = Difference.from_se(d, se, df, "%")
    assert (diff.value, diff.low, diff.high) == pytest.approx((d, d - t * se, d + t * se))
    change = Change.from_log(d, se, df)  # the same interval on the log scale, in percent
    assert (change.pct, change.low_pct, change.high_pct) == pytest.approx(
        tuple(100 * math.expm1(x) for x in (d, d - t * se, d + t * se)))
    assert (diff.significant, diff.sign) == (change.significant, change.sign) == (significant, sign)


# A trial's interval: the mean over its deployments, with the spread between deployments.
# Synthetic configurations whose deployments differ by a known log-sd (BETWEEN) and whose repeats
# on one deployment differ by much less (WITHIN), as on the CPU build (docs/noise.md).

import numpy as np  # noqa: E402

from autotune.core.analysis.study_data import noise_of  # noqa: E402
from autotune.core.maths.stats import (  # noqa: E402
    Noise,
    deployment_noise,
    estimate,
    pooled_noise,
    pooled_sd,
    redeployment_prior,
    t_quantile,
)
from autotune.core.trial.outcome import ProfileResult, TrialOutcome  # noqa: E402

BETWEEN, WITHIN = 0.15, 0.01
KEY = "low-concurrency:mean_e2el_ms"
PROFILE, METRIC = KEY.split(":")


def deployed(number: int, truth: float, deployments: int, repeats: int,
             rng: np.random.Generator) -> TrialOutcome:
    """A trial deployed ``deployments`` times, each measured ``repeats`` times."""
    runs = []
    for _ in range(deployments):
        level = truth * math.exp(rng.normal(0, BETWEEN))
        runs += [{METRIC: level * math.exp(rng.normal(0, WITHIN))} for _ in range(repeats)]
    return TrialOutcome(number, results={PROFILE: ProfileResult(
        PROFILE, tuple(runs), deployment_sizes=(repeats,) * deployments)})


def test_the_interval_over_deployments_covers_the_truth_95_percent_of_the_time_and_the_repeats_alone_do_not():
    rng = np.random.default_rng(7)
    truths = [200.0, 250.0, 300.0, 400.0, 500.0, 600.0]
    seeds, new_hits, old_hits = 400, 0, 0
    for _ in range(seeds):
        trials = [deployed(n, v, 3, 2, rng) for n, v in enumerate(truths)]
        noise = noise_of(trials, "cpu").of(KEY)
        assert noise.df == 12 and "between deployments" in noise.source
        t = trials[0]
        new = t.estimate(PROFILE, METRIC, noise)
        new_hits += new.low <= truths[0] <= new.high
        # The old interval: the noise of repeats on one deployment, every run counted as one.
        old_noise = pooled_noise({KEY: [g for tr in trials
                                        for g in tr.results[PROFILE].by_deployment(METRIC)]}).of(KEY)
        old = estimate(t.results[PROFILE].values(METRIC), old_noise)
        old_hits += old.low <= truths[0] <= old.high
    assert 0.92 <= new_hits / seeds <= 0.98
    assert old_hits / seeds < 0.5  # the test can fail: repeats alone under-cover badly


def test_a_deployment_mean_is_never_surer_than_its_repeats_allow():
    # Deployments that agree better than their own runs: the repeats' floor holds.
    within = [[100.0, 120.0], [120.0, 100.0], [100.0, 121.0], [121.0, 100.0]]
    between = [[110.0, 110.0], [110.5, 110.5]]
    noise = deployment_noise(within, between, redeployment_prior(KEY, "gpu"))
    sd = math.sqrt(np.mean([np.var(np.log(g), ddof=1) for g in within]))  # pooled, 4 df
    assert noise.log_sd == pytest.approx(sd / math.sqrt(2)) and noise.df == 4
    assert noise.log_sd > float(np.std(np.log([110.0, 110.5]), ddof=1))
    assert "repeats" in noise.source


def test_before_any_redeployment_the_platform_prior_is_assumed_and_said():
    within = [[100.0, 100.5], [200.0, 201.0]]  # quiet repeats: below every platform's spread
    for platform in ("cpu", "gpu"):
        noise = deployment_noise(within, [], redeployment_prior(KEY, platform))
        assert noise.log_sd == PLATFORMS[platform].between_log_sd and noise.assumed
        assert noise.source.startswith("assumed") and "between deployments" in noise.source
    assert PLATFORMS["cpu"].between_log_sd > PLATFORMS["gpu"].between_log_sd
    # A noisier metric (TTFT) gets the prior scaled as the registry assumes it noisier.
    assert redeployment_prior("low-concurrency:mean_ttft_ms", "gpu").log_sd > PLATFORMS["gpu"].between_log_sd
    # Loud repeats above the prior: their floor wins, measured, not assumed.
    loud = deployment_noise([[100.0, 150.0], [150.0, 100.0]], [], redeployment_prior(KEY, "gpu"))
    assert not loud.assumed and loud.log_sd > PLATFORMS["gpu"].between_log_sd


def test_a_trial_searched_once_and_confirmed_twice_reads_intervals_that_overlap():
    """The README's main job: trial #0 read 296 ms from its search deployment and about 201 ms
    over two confirmation deployments. Its search interval (the CPU's assumed spread) and its
    interval over all three deployments (the spread measured between deployments of #0 and of
    #4, also confirmed) must overlap; from repeats alone they did not."""
    search = {0: [296.0], 4: [230.0], 2: [310.0]}
    confirmation = {0: [[195.0], [207.0]], 4: [[202.0], [220.0]]}
    before = [TrialOutcome(n, results={PROFILE: ProfileResult(PROFILE, tuple({METRIC: v} for v in runs))})
              for n, runs in search.items()]
    after = [TrialOutcome(n, results={PROFILE: ProfileResult(
        PROFILE, tuple({METRIC: v} for g in [runs, *confirmation.get(n, [])] for v in g),
        deployment_sizes=(1, *(len(g) for g in confirmation.get(n, []))))}) for n, runs in search.items()]
    first = before[0].estimate(PROFILE, METRIC, noise_of(before, "cpu").of(KEY))
    both = after[0].estimate(PROFILE, METRIC, noise_of(after, "cpu").of(KEY))
    assert first.n == 1 and both.n == 3 and both.mean == pytest.approx((296 + 195 + 207) / 3)
    assert first.low <= both.high and both.low <= first.high
    assert noise_of(before, "cpu").of(KEY).assumed and not noise_of(after, "cpu").of(KEY).assumed
    # From repeats on one deployment at the study's 5% noise, as before: no overlap.
    five = Noise(0.05, 6, "repeats")
    old_search, old_confirmed = estimate([290.0, 302.0], five), estimate([195, 199, 205, 207], five)
    assert old_search.low > old_confirmed.high


def test_the_spread_of_small_groups_has_numpys_bits():
    """``pooled_sd`` sums a group of fewer than 8 values in plain Python, in the order numpy's
    pairwise sum adds them, and the precision rule spells out numpy's mean and std(ddof=1):
    the same bits as numpy, size by size (a numpy that changes its order fails here)."""
    from autotune.core.trial.precision import _mean_half

    rng = np.random.default_rng(0)
    for size in range(2, 13):
        for _ in range(200):
            arr = rng.lognormal(7, 0.3, size)
            expected = math.sqrt(float(np.sum((arr - arr.mean()) ** 2)) / (size - 1))
            assert pooled_sd([list(arr)]) == (expected, size - 1, 1)
            half = t_quantile(size - 1) * float(arr.std(ddof=1)) / math.sqrt(size) / float(arr.mean())
            assert _mean_half(arr) == half
