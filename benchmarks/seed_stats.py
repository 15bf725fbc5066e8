"""Statistics over seeds for the benchmarks' claims: a median with its bootstrap interval, the
difference of two medians, a share with its Wilson interval. autotune itself uses none of them,
so they live here, beside the benchmarks that do."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from autotune.core.maths.stats import LEVEL


@dataclass(frozen=True)
class Interval:
    """A statistic with its 95% interval; ``verdict`` of a difference: below, above or tie."""

    value: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        return "below" if self.high < 0 else "above" if self.low > 0 else "tie"


def median_interval(values: Sequence[float], seed: int = 0, n: int = 4000) -> Interval:
    """The median with a 95% percentile-bootstrap interval."""
    arr = np.asarray(values, dtype=float)
    boots = np.median(np.random.default_rng(seed).choice(arr, size=(n, arr.size)), axis=1)
    return Interval(float(np.median(arr)), float(np.quantile(boots, 0.025)),
                    float(np.quantile(boots, 0.975)))


def median_difference(a: Sequence[float], b: Sequence[float], seed: int = 0,
                      n: int = 4000) -> Interval:
    """median(a) - median(b) of two independent samples, with a 95% percentile-bootstrap
    interval: a difference whose interval contains 0 is a tie."""
    rng = np.random.default_rng(seed)
    a_, b_ = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    boots = (np.median(rng.choice(a_, size=(n, a_.size)), axis=1)
             - np.median(rng.choice(b_, size=(n, b_.size)), axis=1))
    return Interval(float(np.median(a_) - np.median(b_)), float(np.quantile(boots, 0.025)),
                    float(np.quantile(boots, 0.975)))


def proportion_interval(k: int, n: int) -> Interval:
    """k of n with its 95% Wilson score interval."""
    if n == 0:
        return Interval(math.nan, 0.0, 1.0)
    z, p = float(ndtri(0.5 + LEVEL / 2)), k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(p, centre - half, centre + half)
