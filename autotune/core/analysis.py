"""Analysis of finished trials: Pareto fronts per profile, recommendations, deltas, effects.

Pure: takes ``TrialRecord`` values (built from Optuna trials by the study layer) and returns
records; rendering (tables, plots, reports) happens elsewhere.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autotune.errors import ConfigError

THROUGHPUT, E2EL = "output_throughput", "mean_e2el_ms"
USES = ("interactive", "throughput", "balanced")


@dataclass(frozen=True)
class TrialRecord:
    """What analysis needs of one finished trial."""

    number: int
    params: Mapping[str, object]
    metrics: Mapping[str, Mapping[str, float]]  # profile -> metric -> mean (empty if failed)
    spread: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    feasible: bool = True
    reference: str = ""
    failure_class: str = ""
    failure_message: str = ""

    def value(self, profile: str, metric: str) -> float:
        return self.metrics[profile][metric]


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` is at least as good everywhere and better somewhere (all objectives minimized)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(
        x < y for x, y in zip(a, b, strict=True))


def _point(t: TrialRecord, profile: str) -> tuple[float, float]:
    return (-t.value(profile, THROUGHPUT), t.value(profile, E2EL))


def pareto_front(trials: Sequence[TrialRecord], profile: str) -> list[TrialRecord]:
    """Feasible trials not dominated in (throughput up, E2EL down) at ``profile``,
    sorted by throughput, highest first."""
    pool = [t for t in trials if t.feasible and profile in t.metrics]
    front = [t for t in pool if not any(dominates(_point(o, profile), _point(t, profile))
                                        for o in pool if o is not t)]
    return sorted(front, key=lambda t: -t.value(profile, THROUGHPUT))


def knee(front: Sequence[TrialRecord], profile: str) -> TrialRecord:
    """The front point closest to the ideal corner after scaling both objectives to [0, 1]."""
    if not front:
        raise ValueError("empty front")
    tps = [t.value(profile, THROUGHPUT) for t in front]
    lats = [t.value(profile, E2EL) for t in front]

    def scaled(v: float, lo: float, hi: float) -> float:
        return 0.0 if hi == lo else (v - lo) / (hi - lo)

    def distance(t: TrialRecord) -> float:
        tp = 1.0 - scaled(t.value(profile, THROUGHPUT), min(tps), max(tps))
        lat = scaled(t.value(profile, E2EL), min(lats), max(lats))
        return math.hypot(tp, lat)

    return min(front, key=distance)


@dataclass(frozen=True)
class Recommendation:
    """The trial picked for a use, and why in one paragraph."""

    use: str
    trial: TrialRecord
    profile: str
    reason: str


def _profile_for(use: str, profiles: Sequence[str]) -> str:
    wanted = {"interactive": "low-concurrency", "throughput": "high-concurrency"}.get(use)
    if wanted in profiles:
        return wanted  # type: ignore[return-value]
    return profiles[0] if use != "throughput" else profiles[-1]


def recommend(trials: Sequence[TrialRecord], profiles: Sequence[str], use: str,
              baseline: TrialRecord | None = None) -> Recommendation:
    """interactive: lowest mean E2EL at low concurrency; throughput: highest output
    throughput at high concurrency; balanced: the knee of the front of the first profile."""
    if use not in USES:
        raise ConfigError(f"--for {use!r}: valid: {', '.join(USES)}")
    profile = _profile_for(use, profiles)
    front = pareto_front(trials, profile)
    if not front:
        raise ConfigError("no feasible trial in the study yet: run more trials first")
    if use == "interactive":
        pick = min(front, key=lambda t: t.value(profile, E2EL))
        why = f"the lowest mean end-to-end latency at {profile}"
    elif use == "throughput":
        pick = max(front, key=lambda t: t.value(profile, THROUGHPUT))
        why = f"the highest output throughput at {profile}"
    else:
        pick = knee(front, profile)
        why = (f"the knee of the {profile} Pareto front ({len(front)} trials): closest to the "
               "ideal of both objectives once each is scaled to the front's range")
    tp, lat = pick.value(profile, THROUGHPUT), pick.value(profile, E2EL)
    text = (f"Trial #{pick.number}{' (' + pick.reference + ')' if pick.reference else ''} has "
            f"{why}: {tp:,.1f} tok/s output throughput and {lat:,.0f} ms mean E2EL.")
    if baseline is not None and baseline.feasible and profile in baseline.metrics \
            and baseline.number != pick.number:
        d_tp = delta_pct(tp, baseline.value(profile, THROUGHPUT))
        d_lat = delta_pct(lat, baseline.value(profile, E2EL))
        noise = max(pick.spread.get(profile, {}).get(THROUGHPUT, 0.0),
                    baseline.spread.get(profile, {}).get(THROUGHPUT, 0.0))
        text += (f" Against the baseline #{baseline.number} that is {d_tp:+.1f}% throughput and "
                 f"{d_lat:+.1f}% latency")
        text += (f" (measured spread between repeats: {noise * 100:.1f}%)." if noise
                 else " (single measurements: differences under ~10% are within this machine's "
                      "noise).")
    others = [f"#{t.number}" for t in front if t.number != pick.number]
    if others:
        text += f" Other trials on this front: {', '.join(others)}."
    return Recommendation(use, pick, profile, text)


def delta_pct(value: float, base: float) -> float:
    return (value - base) / base * 100.0 if base else math.nan


def differing_params(t: TrialRecord, baseline: TrialRecord | None) -> dict[str, object]:
    """Parameters whose value differs from the baseline's (all of them without a baseline)."""
    if baseline is None:
        return dict(t.params)
    keys = set(t.params) | set(baseline.params)
    return {k: t.params.get(k) for k in sorted(keys) if t.params.get(k) != baseline.params.get(k)}


def beyond_noise(t: TrialRecord, baseline: TrialRecord | None, profile: str,
                 metric: str, default_noise: float = 0.10) -> bool | None:
    """Whether the difference to the baseline exceeds the larger measured spread of the two
    (or ``default_noise``, this machine's typical 6-12%, without repeats)."""
    if baseline is None or not baseline.feasible or profile not in baseline.metrics:
        return None
    noise = max(t.spread.get(profile, {}).get(metric, 0.0),
                baseline.spread.get(profile, {}).get(metric, 0.0)) or default_noise
    return abs(delta_pct(t.value(profile, metric), baseline.value(profile, metric))) / 100 > noise


@dataclass(frozen=True)
class Effect:
    """The effect of one parameter on one metric at one profile.

    ``change_pct`` is the change from the parameter's first value to its last (sorted), taken
    from matched pairs of trials that differ in this parameter only (as the reference study's
    one-change-at-a-time configurations do) when there are any, else from group means, which
    other parameters confound.
    """

    param: str
    profile: str
    metric: str
    means: Mapping[str, float]  # str(value) -> mean over feasible trials
    counts: Mapping[str, int]
    change_pct: float
    matched_pairs: int = 0


def _matched_change(pool: Sequence[TrialRecord], param: str, profile: str, metric: str,
                    first: str, last: str) -> tuple[float, int]:
    changes = []
    for a in pool:
        for b in pool:
            if str(a.params.get(param)) != first or str(b.params.get(param)) != last:
                continue
            rest_a = {k: v for k, v in a.params.items() if k != param}
            rest_b = {k: v for k, v in b.params.items() if k != param}
            if rest_a == rest_b:
                changes.append(delta_pct(b.value(profile, metric), a.value(profile, metric)))
    return (statistics.fmean(changes), len(changes)) if changes else (math.nan, 0)


def effects(trials: Sequence[TrialRecord], profiles: Sequence[str], metric: str) -> list[Effect]:
    """Per parameter and profile: mean ``metric`` by value and the change between values."""
    out = []
    params = sorted({k for t in trials for k in t.params})
    for profile in profiles:
        pool = [t for t in trials if t.feasible and profile in t.metrics]
        for param in params:
            groups: dict[str, list[float]] = defaultdict(list)
            for t in pool:
                if param in t.params:
                    groups[str(t.params[param])].append(t.value(profile, metric))
            if len(groups) < 2:
                continue
            means = {k: statistics.fmean(v) for k, v in sorted(groups.items())}
            first, last = list(means)[0], list(means)[-1]
            change, pairs = _matched_change(pool, param, profile, metric, first, last)
            if not pairs:
                change = delta_pct(means[last], means[first])
            out.append(Effect(param, profile, metric, means,
                              {k: len(v) for k, v in sorted(groups.items())}, change, pairs))
    return out


def sign_flips(effects_: Sequence[Effect]) -> list[str]:
    """Parameters whose effect on the metric has opposite signs at different profiles."""
    by_param: dict[str, list[float]] = defaultdict(list)
    for e in effects_:
        if not math.isnan(e.change_pct):
            by_param[e.param].append(e.change_pct)
    return sorted(p for p, changes in by_param.items()
                  if any(c > 0 for c in changes) and any(c < 0 for c in changes))


def failures_by_class(trials: Sequence[TrialRecord]) -> dict[str, list[TrialRecord]]:
    out: dict[str, list[TrialRecord]] = defaultdict(list)
    for t in trials:
        if t.failure_class:
            out[t.failure_class].append(t)
    return dict(sorted(out.items()))
