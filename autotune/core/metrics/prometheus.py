"""A server's /metrics page (Prometheus text format) as counters, gauges and histograms. Pure;
fetching it is ``shell.bench.server_metrics``'s. Families are typed by ``# TYPE`` lines (vLLM's
prometheus_client), else by name (``*_total`` a counter, ``*_bucket`` with ``le`` a histogram,
else a gauge). Counters and histograms are summed over label sets (engines, models): a run's
delta is the server's. Gauges keep one value per label set: a usage share is not summed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Histogram:
    """One histogram family, summed over its label sets."""

    buckets: Mapping[float, float]  # upper bound (inf last) -> cumulative count of observations
    sum: float
    count: float

    def minus(self, before: Histogram | None) -> Histogram:
        """The observations made since ``before`` (a read of the same histogram)."""
        if before is None:
            return self
        return Histogram({le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
                         self.sum - before.sum, self.count - before.count)

    @property
    def mean(self) -> float | None:
        """The mean observation; None without any."""
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True)
class MetricsPage:
    """One read of a /metrics page."""

    counters: Mapping[str, float] = field(default_factory=dict)  # sample name (``..._total``) -> sum
    gauges: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # family -> per label set
    histograms: Mapping[str, Histogram] = field(default_factory=dict)  # family -> summed


_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_ESCAPE = re.compile(r"\\(.)")


def _split_sample(line: str) -> tuple[str, dict[str, str], float] | None:
    """``name{labels} value [timestamp]``; None for a line that is not a sample."""
    found = _SAMPLE.fullmatch(line)
    if found is None:
        return None
    name, inside, value = found.groups()
    labels = {}
    if inside:
        pos = 0
        for label in _LABEL.finditer(inside):
            if label.start() != pos:
                return None
            labels[label[1]] = _ESCAPE.sub(lambda m: "\n" if m[1] == "n" else m[1], label[2])
            pos = label.end()
        if pos != len(inside):
            return None
    try:
        return name, labels, float(value)
    except ValueError:
        return None


def _kind(name: str, types: Mapping[str, str], histograms: set[str]) -> tuple[str, str]:
    """The family a sample belongs to and its kind: counter, gauge, a histogram part (its
    suffix) or skip."""
    if name.endswith("_created"):
        return name, "skip"  # when a counter or histogram was created (typed as a gauge by some)
    if name in types:  # a gauge, an untyped sample or an old-style counter without _total
        kind = types[name]
        return name, {"counter": "counter", "gauge": "gauge", "untyped": "gauge"}.get(kind, "skip")
    base, _, suffix = name.rpartition("_")
    suffix = f"_{suffix}"
    declared = types.get(base)
    if suffix in _HISTOGRAM_PARTS and base in histograms:
        return base, suffix
    if suffix == "_total" and declared in (None, "counter"):
        return name, "counter"
    if declared is not None:
        return name, "skip"  # a summary's parts
    return name, "gauge"


def parse_metrics(text: str, only: tuple[str, ...] = ()) -> MetricsPage:
    """Every counter, gauge and histogram of a /metrics page (with ``only``: of the families
    whose names start so, a cheap read of a few); malformed lines are skipped."""
    types: dict[str, str] = {}
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if only and not line.removeprefix("# TYPE ").startswith(only):
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                types[parts[2]] = parts[3]
        elif line and not line.startswith("#"):
            found = _split_sample(line)
            if found is not None:
                samples.append(found)
    histograms = {k for k, v in types.items() if v == "histogram"} | {
        name.removesuffix("_bucket") for name, labels, _ in samples
        if name.endswith("_bucket") and "le" in labels and name.removesuffix("_bucket") not in types}
    counters: dict[str, float] = {}
    gauges: dict[str, list[float]] = {}
    parts: dict[str, dict] = {}
    for name, labels, value in samples:
        family, kind = _kind(name, types, histograms)
        if kind == "counter":
            counters[family] = counters.get(family, 0.0) + value
        elif kind == "gauge":
            gauges.setdefault(family, []).append(value)
        elif kind == "_bucket":
            try:
                le = float(labels["le"])  # "+Inf" included
            except (KeyError, ValueError):
                continue
            buckets = parts.setdefault(family, {"buckets": {}, "sum": 0.0, "count": 0.0})["buckets"]
            buckets[le] = buckets.get(le, 0.0) + value
        elif kind in ("_sum", "_count"):
            part = parts.setdefault(family, {"buckets": {}, "sum": 0.0, "count": 0.0})
            part[kind[1:]] += value
    return MetricsPage(counters, {k: tuple(v) for k, v in gauges.items()},
                       {k: Histogram(dict(sorted(p["buckets"].items())), p["sum"], p["count"])
                        for k, p in parts.items()})
