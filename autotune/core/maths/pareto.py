"""Pareto fronts and knees over any list of costs. Pure.

Items are anything; ``costs`` turns one into a tuple of numbers to minimize (an objective to
maximize contributes its negated value: ``Objective.cost``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
Costs = Callable[[T], Sequence[float]]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is at least as good everywhere and better somewhere (all costs minimized)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True))


def pareto_front(items: Sequence[T], costs: Costs) -> list[T]:
    """The items no other item dominates, in their given order."""
    points = [tuple(costs(i)) for i in items]
    return [item for item, p in zip(items, points, strict=True)
            if not any(dominates(q, p) for q in points if q is not p)]


def knee(front: Sequence[T], costs: Costs) -> T:
    """The front member closest to the ideal corner once each cost is scaled to [0, 1] over
    the front (a one-member front is its own knee)."""
    if not front:
        raise ValueError("empty front")
    points = [tuple(costs(i)) for i in front]
    lows = [min(c) for c in zip(*points, strict=True)]
    highs = [max(c) for c in zip(*points, strict=True)]

    def distance(p: Sequence[float]) -> float:
        return math.hypot(*[(x - lo) / (hi - lo) if hi > lo else 0.0
                            for x, lo, hi in zip(p, lows, highs, strict=True)])

    return min(zip(front, points, strict=True), key=lambda fp: distance(fp[1]))[0]


def hypervolume_2d(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The area that ``points`` dominate (both costs minimized), bounded by ``reference``;
    points not better than the reference on both costs add nothing."""
    inside = sorted((x, y) for x, y in points if x < reference[0] and y < reference[1])
    area, floor = 0.0, reference[1]
    for x, y in inside:  # left to right: each lower point adds a strip to the reference
        if y < floor:
            area += (reference[0] - x) * (floor - y)
            floor = y
    return area
