"""What each figure shows, as records: the front's points with the recommended picks marked and
labels placed so that none overprints another, and, per pick, latency against load from what
the study measured (its fixed profiles at their concurrency, its capacity probes). Pure:
``study.output.plots`` draws these records and decides nothing; tests read them, not pixels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.core.analysis.study_data import StudyData
from autotune.core.metrics.registry import LATENCY_METRIC, label_of, unit_of

# The front's axes in points (an 8 x 5.5 in figure at its margins) and its labels' font: what
# a label covers, to place labels apart. Matplotlib pads each axis by 5% of its data range.
AXES_PT = (500.0, 330.0)
CHAR_PT, LINE_PT, MARKER_PT = 4.9, 10.0, 5.0
MARGIN = 0.05
# Where a label may go, in points from its point (lower-left corner of the text), nearest first.
_OFFSETS = [(6.0, 4.0), (6.0, -14.0), (-6.0, 4.0), (-6.0, -14.0), (0.0, 12.0), (0.0, -22.0),
            (14.0, 14.0), (14.0, -24.0), (-14.0, 14.0), (-14.0, -24.0), (24.0, -5.0),
            (-24.0, -5.0), (0.0, 26.0), (0.0, -36.0)]


@dataclass(frozen=True)
class FrontPoint:
    """One feasible trial in the plane of the first and last objectives: its means, their 95%
    intervals, whether it is on the front, a reference, picked for some uses, and where its
    label goes (``label_at``: the text's lower-left corner, in points from the point)."""

    number: int
    label: str
    x: float
    y: float
    x_interval: tuple[float, float]
    y_interval: tuple[float, float]
    on_front: bool
    reference: bool
    picked_for: tuple[str, ...]
    label_at: tuple[float, float]


@dataclass(frozen=True)
class FrontPlot:
    x_title: str
    y_title: str
    points: tuple[FrontPoint, ...]
    infeasible: int  # finished trials not drawn


def front_plot(data: StudyData, picks: Mapping[str, int]) -> FrontPlot:
    """The front's figure: every feasible trial, the picks (use -> trial number) marked, the
    labels placed apart (``place_labels``)."""
    ox, oy = data.objectives[0], data.objectives[-1]
    front = {t.number for t in data.front()}
    uses: dict[int, list[str]] = {}
    for use, number in picks.items():
        uses.setdefault(number, []).append(use)
    # Picks first, then the front: they get the nearest places.
    pool = sorted(data.feasible, key=lambda t: (t.number not in uses, t.number not in front, t.number))
    ex = [data.objective_estimate(t, ox) for t in pool]
    ey = [data.objective_estimate(t, oy) for t in pool]
    labels = [t.label + (f" ({', '.join(uses[t.number])})" if t.number in uses else "") for t in pool]
    places = place_labels([(e.mean, f.mean) for e, f in zip(ex, ey, strict=True)], labels)
    better = {True: "lower is better", False: "higher is better"}
    points = tuple(FrontPoint(t.number, label, e.mean, f.mean, (e.low, e.high), (f.low, f.high),
                              t.number in front, bool(t.reference), tuple(uses.get(t.number, ())),
                              at)
                   for t, label, e, f, at in zip(pool, labels, ex, ey, places, strict=True))
    return FrontPlot(f"{ox.label}, {better[ox.minimize]}", f"{oy.label}, {better[oy.minimize]}",
                     points, len(data.outcomes) - len(pool))


@dataclass(frozen=True)
class Box:
    """A rectangle in points on the axes."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlap(self, other: Box) -> float:
        w = min(self.x1, other.x1) - max(self.x0, other.x0)
        h = min(self.y1, other.y1) - max(self.y0, other.y0)
        return w * h if w > 0 and h > 0 else 0.0


def _to_points(xy: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Data coordinates to points on the axes, as matplotlib's default limits place them."""
    def scale(values: list[float], size: float) -> list[float]:
        low, high = min(values), max(values)
        span = (high - low) or abs(high) or 1.0
        low, span = low - MARGIN * span, span * (1 + 2 * MARGIN)
        return [(v - low) / span * size for v in values]
    xs, ys = scale([p[0] for p in xy], AXES_PT[0]), scale([p[1] for p in xy], AXES_PT[1])
    return list(zip(xs, ys, strict=True))


def label_box(at: tuple[float, float], offset: tuple[float, float], text: str) -> Box:
    """The box a label covers, its text's lower-left corner ``offset`` from the point ``at``
    (a negative x offset puts the text's right end there, as the figure aligns it)."""
    width = CHAR_PT * len(text)
    x0 = at[0] + offset[0] - (width if offset[0] < 0 else 0.0)
    y0 = at[1] + offset[1]
    return Box(x0, y0, x0 + width, y0 + LINE_PT)


def place_labels(xy: Sequence[tuple[float, float]], labels: Sequence[str]) -> list[tuple[float, float]]:
    """Each label's offset from its point (``label_box``), chosen in order: the nearest place
    that covers no label placed before it and no point, else the one that covers least."""
    if not xy:
        return []
    at = _to_points(xy)
    markers = [Box(x - MARKER_PT, y - MARKER_PT, x + MARKER_PT, y + MARKER_PT) for x, y in at]
    placed: list[Box] = []
    chosen = []
    for i, (p, text) in enumerate(zip(at, labels, strict=True)):
        def covered(offset: tuple[float, float], p=p, text=text, i=i) -> float:
            box = label_box(p, offset, text)
            outside = (max(0.0, -box.x0) + max(0.0, box.x1 - AXES_PT[0])) * LINE_PT
            return (sum(box.overlap(b) for b in placed) + outside
                    + sum(box.overlap(m) for j, m in enumerate(markers) if j != i))
        best = min(_OFFSETS, key=lambda o: (covered(o) > 0, covered(o)))
        placed.append(label_box(p, best, text))
        chosen.append(best)
    return chosen


@dataclass(frozen=True)
class LoadPoint:
    """One measurement of a pick's latency at a load: a fixed profile's mean with its 95%
    interval at the profile's concurrency, or one capacity probe (no interval: one run)."""

    load: float
    latency: float
    low: float | None
    high: float | None
    source: str  # the profile's name; 'capacity probe' for a probe


@dataclass(frozen=True)
class LoadCurve:
    """A pick's latency (``metric``) against concurrency, from every run the study made of it."""

    number: int
    label: str
    uses: tuple[str, ...]
    metric: str
    points: tuple[LoadPoint, ...]

    @property
    def title(self) -> str:
        return (f"{self.label} ({', '.join(self.uses)}): {label_of(self.metric)} "
                f"({unit_of(self.metric)}) against concurrency")


def load_curves(data: StudyData, picks: Mapping[str, int], metric: str = LATENCY_METRIC
                ) -> tuple[LoadCurve, ...]:
    """Per picked trial (once, with every use it is picked for): its fixed profiles at their
    concurrency (where the study stored it) and its concurrency capacity probes, by load; a
    pick with fewer than two points has no curve."""
    by_number = {t.number: t for t in data.outcomes}
    uses: dict[int, list[str]] = {}
    for use, number in picks.items():
        uses.setdefault(number, []).append(use)
    curves = []
    for number, its_uses in uses.items():
        t = by_number[number]
        points = []
        for profile in t.results:
            load = data.loads.get(profile)
            if profile in t.capacity or load is None or not t.has(profile, metric):
                continue
            e = data.estimate(t, profile, metric)
            points.append(LoadPoint(load, e.mean, e.low, e.high, profile))
        for search in t.capacity.values():
            if search.load != "concurrency":
                continue  # a request rate is another axis
            points += [LoadPoint(p.load, float(p.metrics[metric]), None, None, "capacity probe")
                       for p in search.probes if metric in p.metrics]
        if len({p.load for p in points}) >= 2:
            curves.append(LoadCurve(number, t.label, tuple(its_uses), metric,
                                    tuple(sorted(points, key=lambda p: (p.load, p.source)))))
    return tuple(curves)


def load_png(curve: LoadCurve) -> str:
    """The file name of a pick's latency-against-load figure."""
    return f"load-trial-{curve.number}.png"
