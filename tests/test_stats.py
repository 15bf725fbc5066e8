"""A change and a difference: one interval logic, on the log scale and on the metric's own."""

from __future__ import annotations

import math

import pytest

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
