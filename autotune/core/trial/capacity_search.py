"""Capacity under SLOs: the highest load at which every SLO holds, found on one deployment. Pure.

A state machine over the probes made so far, so that it can be tested on synthetic latency
curves: ``next_probe(spec, probes, incumbent)`` says which load to measure next, or that the
search is done and where the boundary lies. The incumbent probe, the log-scale bracket, the
bisection, re-probes and each probe's verdict (``stats.judge``): docs/capacity.md."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from autotune.core.maths.stats import Estimate, Noise, Verdict, judge, t_quantile
from autotune.core.metrics.registry import METRICS
from autotune.core.metrics.summary import SloLimits
from autotune.core.trial.early_fail import SettleRule, fail_rule
from autotune.core.workload.capacity_spec import CapacitySpec
from autotune.errors import ConfigError

# Objectives a capacity search may stop early for: they grow with the load carried.
MONOTONE_IN_LOAD = tuple(k for k, m in METRICS.items() if m.grows_with_load)
# One run's verdict beyond the noise, as the judge reads it (two-sided 95%, assumed noise): how
# far past a limit a run's value must be before an early stop settles its fail.
Z = t_quantile(math.inf)


class LoadOutcome(Enum):
    PASS = "pass"
    FAIL = "fail"
    UNSURE = "unsure"


@dataclass(frozen=True)
class Probe:
    """One measured run at one load: its flat metrics (vLLM keys), and, for a run stopped once
    its fail was settled, how many of its planned requests it measured and why it stopped."""

    load: float
    metrics: Mapping[str, float]
    measured_requests: int = 0  # 0: not recorded (a run that was never stopped early)
    planned_requests: int = 0
    settled: str = ""  # why it stopped early ("": it ran every planned request)


@dataclass(frozen=True)
class LoadVerdict:
    load: float
    runs: int
    verdict: LoadOutcome
    sure: bool  # decided beyond the noise (False: decided by the mean after max_repeats)
    margins: Mapping[str, float]  # limit text -> mean log margin (> 0: past)


def judge_load(spec: CapacitySpec, load: float, runs: Sequence[Mapping[str, float]]) -> LoadVerdict:
    """The verdict of every run at one load (see the module doc)."""
    # A run with failed requests (timeouts at a load the server cannot carry) misses every SLO.
    margins = {lim.text: [math.inf if r.get("failed", 0) > 0 else lim.margin(r[lim.metric])
                          for r in runs] for lim in spec.limits}
    n = len(runs)
    means = {k: statistics.fmean(v) for k, v in margins.items()}
    said = {k: _limit_verdict(v, spec.noise) for k, v in margins.items()}
    if any(v is Verdict.WORSE for v in said.values()):
        verdict, sure = LoadOutcome.FAIL, True
    elif all(v is Verdict.BETTER for v in said.values()):
        verdict, sure = LoadOutcome.PASS, True
    elif n >= spec.max_repeats:
        verdict = LoadOutcome.FAIL if any(m > 0 for m in means.values()) else LoadOutcome.PASS
        sure = False
    else:
        verdict, sure = LoadOutcome.UNSURE, False
    return LoadVerdict(load, n, verdict, sure, means)


def _limit_verdict(margins: Sequence[float], noise: float) -> Verdict:
    """The one verdict rule (``stats.judge``) on the runs' log margins against the limit (a
    margin of 0, known exactly): worse is past it, better within it, beyond the noise of one
    run, the larger of ``noise`` (assumed) and the runs' own spread (measured, n - 1 df); a
    run with failed requests is past every limit."""
    if any(math.isinf(m) for m in margins):
        return Verdict.WORSE
    n = len(margins)
    spread = statistics.stdev(margins) if n >= 2 else 0.0
    run = Noise(spread, n - 1.0, "the runs at this load") if spread > noise else \
        Noise(noise, math.inf, "assumed")
    runs = Estimate(math.exp(min(statistics.fmean(margins), 700.0)), n, run)  # exp(709) overflows
    limit = Estimate(1.0, 1, Noise(0.0, math.inf, "the limit"))
    return judge(runs, limit, margin=0.0, minimize=True).verdict


def by_load(probes: Sequence[Probe]) -> dict[float, list[Mapping[str, float]]]:
    """The runs of ``probes`` grouped by load, in load order."""
    out: dict[float, list[Mapping[str, float]]] = {}
    for p in sorted(probes, key=lambda p: p.load):
        out.setdefault(p.load, []).append(p.metrics)
    return out


def verdicts(spec: CapacitySpec, probes: Sequence[Probe]) -> list[LoadVerdict]:
    """One verdict per load probed, in load order."""
    return [judge_load(spec, load, runs) for load, runs in by_load(probes).items()]


@dataclass(frozen=True)
class Incumbent:
    """The load at which another trial met the SLOs, and what it sustained there."""

    trial: int
    load: float
    throughput: float  # output tok/s at that load
    others: Mapping[str, float] = field(default_factory=dict)  # other objectives' costs


def choose_incumbent(candidates: Sequence[Incumbent], own_costs: Mapping[str, float]
                     ) -> Incumbent | None:
    """The candidate that sustained the most throughput among those at least as good as this
    trial on every other objective (costs: lower is better). Only such a candidate can show
    that this trial is dominated."""
    fit = [c for c in candidates
           if all(name in own_costs and cost <= own_costs[name] for name, cost in c.others.items())]
    return max(fit, key=lambda c: c.throughput, default=None)


@dataclass(frozen=True)
class Boundary:
    """Where the search ended. ``load`` is the highest load that met every SLO (None: no load
    in [low, high] did, or the search stopped below an incumbent); ``fail_load`` the lowest
    load above it that did not (None: ``high`` itself met them)."""

    load: float | None
    fail_load: float | None
    estimate: float | None  # the interpolated crossing, inside [load, fail_load]
    reason: str
    probes: int
    below_incumbent: int | None = None  # trial number whose load this one could not carry

    @property
    def found(self) -> bool:
        return self.load is not None


@dataclass(frozen=True)
class ProbeStep:
    """Measure ``load`` next (``boundary`` None), or stop with ``boundary``."""

    load: float | None = None
    boundary: Boundary | None = None
    why: str = ""


def _crossing(lo: LoadVerdict, hi: LoadVerdict) -> float:
    """Where the worst limit's margin crosses zero, linear in log load between two verdicts."""
    a, b = max(lo.margins.values()), max(hi.margins.values())
    if not (a < 0 < b):
        return lo.load
    t = -a / (b - a)
    return math.exp(math.log(lo.load) + t * (math.log(hi.load) - math.log(lo.load)))


def _step(spec: CapacitySpec, load: float, factor: float) -> float:
    """``load`` times ``factor`` (< 1: down), snapped, and at least one step away for
    concurrency (a small factor could round back to ``load``)."""
    out = spec.snap(load * factor)
    if out == load and spec.integer:
        out = spec.snap(load + (1 if factor > 1 else -1))
    return out


def next_probe(spec: CapacitySpec, probes: Sequence[Probe], incumbent: Incumbent | None = None,
               around: Boundary | None = None) -> ProbeStep:
    """The search's next move after ``probes`` (the pure core of a capacity trial); ``around``:
    where an earlier search of this configuration ended (see the module doc)."""
    if not spec.limits:
        raise ConfigError("a capacity profile needs at least one SLO, e.g. --slo 'p99_ttft_ms<=2000'")
    factor = spec.factor
    if around is not None:
        probed = {p.load for p in probes}
        again = [spec.snap(x) for x in (around.load, around.fail_load) if x is not None]
        todo = [x for x in again if x not in probed]
        if todo:
            return ProbeStep(load=todo[0], why="re-probing the boundary found before")
        factor = spec.resolution  # a redeployment moves the boundary a little, if at all
    if not probes:
        if incumbent is not None:
            return ProbeStep(load=spec.snap(incumbent.load), why=f"incumbent #{incumbent.trial}'s load")
        return ProbeStep(load=spec.first, why="start")
    judged = verdicts(spec, probes)
    unsure = [v for v in judged if v.verdict is LoadOutcome.UNSURE]
    if unsure and len(probes) < spec.max_probes:
        return ProbeStep(load=unsure[0].load, why="near the limit: repeated")
    if incumbent is not None:
        at = next((v for v in judged if v.load == spec.snap(incumbent.load)), None)
        measured = [p.metrics.get("output_throughput", math.inf) for p in probes
                    if p.load == spec.snap(incumbent.load)]
        if at is not None and at.verdict is LoadOutcome.FAIL and at.sure and \
                len(judged) == 1 and statistics.fmean(measured) <= incumbent.throughput:
            return ProbeStep(boundary=Boundary(
                None, at.load, None, f"past the SLOs at incumbent #{incumbent.trial}'s load "
                f"{at.load:g} beyond the noise, with no more throughput: dominated by it",
                len(probes), below_incumbent=incumbent.trial))
    passes = [v for v in judged if v.verdict is LoadOutcome.PASS]
    lo = max(passes, key=lambda v: v.load, default=None)
    fails = [v for v in judged if v.verdict is LoadOutcome.FAIL and (lo is None or v.load > lo.load)]
    hi = min(fails, key=lambda v: v.load, default=None)
    out_of_probes = len(probes) >= spec.max_probes

    def done(reason: str) -> ProbeStep:
        est = _crossing(lo, hi) if lo is not None and hi is not None else (lo.load if lo else None)
        return ProbeStep(boundary=Boundary(lo.load if lo else None, hi.load if hi else None, est,
                                      reason, len(probes)))

    if lo is None:
        if hi is not None and hi.load <= spec.low:
            return done(f"past the SLOs at the lowest load, {spec.low:g}")
        if out_of_probes:
            return done("probe budget spent before any load met the SLOs")
        return ProbeStep(load=_step(spec, hi.load, 1 / factor), why="bracketing down")
    if hi is None:
        if lo.load >= spec.high:
            return done(f"met the SLOs at the highest load searched, {spec.high:g}")
        if out_of_probes:
            return done("probe budget spent while bracketing up")
        return ProbeStep(load=_step(spec, lo.load, factor), why="bracketing up")
    if hi.load / lo.load <= spec.resolution or (spec.integer and hi.load - lo.load <= 1):
        return done("bracket within the resolution")
    mid = spec.snap(math.sqrt(lo.load * hi.load))
    if mid in (lo.load, hi.load):  # rounding: step to the integer between them
        mid = lo.load + 1 if spec.integer else (lo.load + hi.load) / 2
    if out_of_probes:
        return done("probe budget spent while bisecting")
    return ProbeStep(load=mid, why="bisecting")


Measure = Callable[[float, str, SettleRule | None], Probe]


def search(profile: str, spec: CapacitySpec, measure: Measure, incumbent: Incumbent | None = None,
           around: Boundary | None = None) -> CapacitySearch:
    """Run the search: ``measure(load, why, settle)`` makes one probe (a benchmark run on the
    deployment, or a synthetic curve in tests) and returns it; it may stop the run once
    ``settle`` (None: run it whole) says its fail is settled."""
    probes: list[Probe] = []
    rule = fail_rule(spec.limits, Z * spec.noise)
    at_incumbent = spec.snap(incumbent.load) if incumbent is not None else None
    while True:
        step = next_probe(spec, probes, incumbent, around)
        if step.boundary is not None:
            return CapacitySearch(profile, spec.load, tuple(lim.text for lim in spec.limits),
                                  step.boundary, tuple(probes))
        assert step.load is not None
        first = step.load not in {p.load for p in probes} and step.load != at_incumbent
        probes.append(measure(step.load, step.why, rule if first else None))


@dataclass(frozen=True)
class CapacitySearch:
    """What one capacity profile's search measured on one deployment: every probe, where it
    ended, and what it searched (load axis and limits)."""

    profile: str
    load: str
    limits: tuple[str, ...]
    boundary: Boundary
    probes: tuple[Probe, ...] = ()

    def runs_at_boundary(self) -> list[dict[str, float]]:
        """The runs at the boundary load, with ``capacity_load``: the profile's result."""
        if not self.boundary.found:
            return []
        return [dict(p.metrics, capacity_load=p.load) for p in self.probes
                if p.load == self.boundary.load]

    def to_dict(self) -> dict:
        b = self.boundary
        return {"profile": self.profile, "load": self.load, "limits": list(self.limits),
                "boundary": {"load": b.load, "fail_load": b.fail_load, "estimate": b.estimate,
                             "reason": b.reason, "probes": b.probes,
                             "below_incumbent": b.below_incumbent},
                "probes": [{"load": p.load, "metrics": dict(p.metrics),
                            "measured_requests": p.measured_requests,
                            "planned_requests": p.planned_requests, "settled": p.settled}
                           for p in self.probes]}

    @classmethod
    def from_dict(cls, d: Mapping) -> CapacitySearch:
        return cls(d["profile"], d["load"], tuple(d["limits"]), Boundary(**d["boundary"]),
                   tuple(Probe(p["load"], p["metrics"], p.get("measured_requests", 0),
                               p.get("planned_requests", 0), p.get("settled", ""))
                         for p in d["probes"]))


def boundary_text(search: CapacitySearch, unit: str = "") -> str:
    """One line: '12 concurrent (fails at 16; 5 probes)', or why it has no capacity. Text in
    the core because the verdict writes it into the failure message of a trial that met no
    load; the tables' short form is the CLI's (``cli.common.capacity_cell``)."""
    b = search.boundary
    unit = unit or ("concurrent" if search.load == "concurrency" else "req/s")
    if b.below_incumbent is not None:
        return f"below #{b.below_incumbent} (past the SLOs at its load {b.fail_load:g})"
    if not b.found:
        return f"no load meets the SLOs ({b.reason})"
    above = f"fails at {b.fail_load:g}" if b.fail_load is not None else "highest load searched"
    return f"{b.load:g} {unit} ({above}; {b.probes} probes)"


def goodput_limits(spec: CapacitySpec) -> SloLimits:
    """Per-request limits for goodput implied by the SLOs: a request counts as good when it
    meets the tightest limit on each latency (TTFT, TPOT, E2EL) an SLO names."""
    out: dict[str, float] = {}
    for lim in spec.limits:
        kind = METRICS[lim.metric].latency
        if lim.op == "<=" and kind in ("ttft", "tpot", "e2el"):
            out[kind] = min(out.get(kind, math.inf), lim.limit)
    return SloLimits(ttft_ms=out.get("ttft"), tpot_ms=out.get("tpot"), e2el_ms=out.get("e2el"))
