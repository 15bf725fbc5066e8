"""What a trial measures and what it stores, as records; their flat attribute form. Pure.
``Measurement`` is what one deployment produced; ``TrialOutcome`` adds what a study's trial
stores beside it (number, state, parameters, flags, SLO violations, links to other trials), each
fact one field of one of the two. Only ``to_attrs`` and ``from_attrs`` know how an outcome is
spelled as Optuna user attributes (``study.store.records`` writes and reads them)."""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.core.deployment import failures
from autotune.core.deployment.failures import FailureClass
from autotune.core.deployment.startup import PHASES
from autotune.core.maths.stats import Estimate, Noise, estimate
from autotune.core.metrics.registry import SUMMARY_METRICS
from autotune.core.space.search_space import Value, params_key
from autotune.core.trial.capacity_search import CapacitySearch
from autotune.core.trial.precision import RunStop


@dataclass(frozen=True)
class ProfileResult:
    """All repeats of one profile: flat vLLM-keyed metrics per repeat, on one deployment, or
    (``deployment_sizes``: how many consecutive runs each deployment gave) on several; and how
    each run ended (``stops``, in the same order; empty where older autotune stored none)."""

    profile: str
    runs: tuple[Mapping[str, float], ...]
    stops: tuple[RunStop, ...] = ()
    deployment_sizes: tuple[int, ...] = ()  # () : every run on one deployment

    @property
    def requests_text(self) -> str:
        """'40 precise', '100+100 ceiling', '8 ceiling, reached 8 of 100': the requests each run
        used and why the runs stopped (one reason when all agree); '' without stops stored."""
        if not self.stops:
            return ""
        reasons = list(dict.fromkeys(s.reason for s in self.stops))
        text = "+".join(str(s.requests) for s in self.stops) + " " + "/".join(reasons)
        reached = self.reached_text
        return text + (f", {reached}" if reached else "")

    @property
    def reached_text(self) -> str:
        """'reached 8 of 100' where a run never had the profile's concurrency in flight (the
        fewest reached over the runs); '' otherwise."""
        short = [s for s in self.stops if s.short_of_load]
        return min(short, key=lambda s: s.reached_concurrency).reached_text if short else ""

    def values(self, metric: str) -> list[float]:
        return [float(r[metric]) for r in self.runs if metric in r]

    def by_deployment(self, metric: str) -> list[list[float]]:
        """The values of ``metric`` per deployment (deployments without it left out)."""
        def grouped() -> tuple[tuple[float, ...], ...]:
            sizes = self.deployment_sizes or (len(self.runs),)
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            groups = [tuple(float(r[metric]) for r in self.runs[a:a + n] if metric in r)
                      for a, n in zip(starts, sizes, strict=True)]
            return tuple(g for g in groups if g)
        return [list(g) for g in self._once("groups", metric, grouped)]

    def deployment_means(self, metric: str) -> list[float]:
        return list(self._once("means", metric, lambda: tuple(
            statistics.fmean(g) for g in self.by_deployment(metric))))

    def estimate(self, metric: str, noise: Noise) -> Estimate:
        """The mean over deployments (``stats.estimate``); ``noise`` is that of one
        deployment's mean."""
        def mean_and_n() -> tuple[float, int]:
            found = estimate(self.deployment_means(metric), noise)
            return found.mean, found.n
        mean, n = self._once("estimate", metric, mean_and_n)
        return Estimate(mean, n, noise)

    def _once(self, kind: str, metric: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` for (``kind``, ``metric``), computed once: a recommendation compares
        the same trials many times over, and a record's runs never change."""
        memo = self._memo
        if (kind, metric) not in memo:
            memo[kind, metric] = compute()
        return memo[kind, metric]

    @functools.cached_property
    def _memo(self) -> dict[tuple[str, str], Any]:
        """``_once``'s values. Not a field: no comparison, copy or rendering sees it."""
        return {}

    def mean(self, metric: str) -> float:
        """The mean over deployments of each deployment's mean (the runs' mean on one)."""
        return statistics.fmean(self.deployment_means(metric))

    def spread(self, metric: str) -> float:
        """(max - min) / mean over repeats."""
        values = self.values(metric)
        mean = statistics.fmean(values)
        return (max(values) - min(values)) / mean if mean else 0.0

    def means(self) -> dict[str, float]:
        return {k: self.mean(k) for k in self.runs[0]} if self.runs else {}


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """What one deployment of one configuration produced. ``failure`` is None for a served,
    fully measured configuration; ``startup_s`` None for one that started no server."""

    results: Mapping[str, ProfileResult] = field(default_factory=dict)
    capacity: Mapping[str, CapacitySearch] = field(default_factory=dict)  # per capacity profile
    raced: str = ""  # measured in part: beaten beyond the noise, its remaining runs skipped
    failure: FailureClass | None = None
    failure_message: str = ""  # vLLM's or our words for the failure
    log_tail: str = ""
    startup_s: float | None = None
    # StartupPhases.as_dict (core.deployment.startup): phase seconds, the compile cache's status
    startup_phases: Mapping[str, float | str] = field(default_factory=dict)
    bench_s: float | None = None
    wall_s: float | None = None  # the deployment's, from validation to teardown
    teardown_clean: bool | None = None
    teardown_s: float | None = None
    gpu_memory_mib: int | None = None  # held by the server once ready (NVML; GPUs only)
    vllm_version: str = ""
    hardware: str = ""
    # How the server was started, for an export that runs as measured: the entry point's words
    # before the model (``vllm serve``, or an interpreter and ``-m MODULE`` that takes --model)
    # and the variables of its environment that change the server (never a key).
    entrypoint: tuple[str, ...] = ()
    server_env: Mapping[str, str] = field(default_factory=dict)
    files: tuple[Path, ...] = ()  # benchmark JSONs and the server log (artifacts, not stored)


@dataclass(frozen=True)
class TrialOutcome(Measurement):
    """Everything one trial stores: its ``Measurement`` and its place in the study. ``state``
    is Optuna's, in lower case."""

    number: int
    state: str = "complete"  # complete | fail | running | waiting
    params: Mapping[str, Value] = field(default_factory=dict)
    reference: str = ""
    model: str = ""
    argv: tuple[str, ...] = ()
    slo_violations: Mapping[str, float] = field(default_factory=dict)  # SLO key -> how far past
    trial_wall_s: float | None = None  # the whole trial's, from sampling to storing
    worker: Mapping[str, Any] = field(default_factory=dict)
    duplicate_of: int | None = None  # same flags as this trial; a failure copied, not relaunched
    engine: str = ""  # the resolved engine's identity (shell.server.validation.engine_identity)
    same_engine_as: int | None = None  # a copy: that trial's engine and values, not deployed
    retry_of: int | None = None  # a dead worker's trial, run again
    skipped: str = ""  # given back before deploying (a duplicate, or over budget)
    imported_from: str = ""
    derived: tuple[str, ...] = ()  # metrics computed from others on import

    @property
    def served(self) -> bool:
        """Finished without a failure: the deployment answered and was measured to the end.
        A capacity search stopped below an incumbent's load is served (its probes are its
        measurements) though it may hold no results; an SLO missed is a failure."""
        return self.state == "complete" and self.failure is None

    @property
    def feasible(self) -> bool:
        """Served with results, within every SLO, and every capacity found (a search stopped
        below an incumbent is served but has none)."""
        return (self.served and bool(self.results)
                and all(v <= 0 for v in self.slo_violations.values())
                and all(s.boundary.found for s in self.capacity.values()))

    @property
    def dominated(self) -> bool:
        """Served, but a capacity search stopped below an incumbent's load."""
        return self.served and any(s.boundary.below_incumbent is not None
                                   for s in self.capacity.values())

    @property
    def status(self) -> str:
        """For tables: ok, the failure class, dominated, or Optuna's state."""
        if self.feasible:
            return "raced" if self.raced else "ok"
        return self.failure.name if self.failure else "dominated" if self.dominated else self.state

    @property
    def startup_text(self) -> str:
        """'75 s: compile 29 miss, workers 20, imports 11': the ready seconds and the phases that
        took three quarters of them (at most three), largest first; '-' for a trial that never
        started a server."""
        if self.startup_s is None:
            return "-"
        shown: list[str] = []
        covered = 0.0
        for seconds, text in sorted(_phase_parts(self.startup_phases), reverse=True):
            if len(shown) == 3 or covered >= 0.75 * self.startup_s:
                break
            shown.append(text)
            covered += seconds
        return f"{self.startup_s:.0f} s" + (": " + ", ".join(shown) if shown else "")

    @property
    def startup_detail(self) -> str:
        """Every phase of half a second or more in the order they ran, and what no phase names:
        'ready in 75 s: imports 11, engine 9, workers 20, compile 29 miss, KV cache 3, unnamed 1'."""
        if self.startup_s is None:
            return "-"
        parts = [text for seconds, text in _phase_parts(self.startup_phases) if seconds >= 0.5]
        if self.startup_phases.get("launch"):  # forked by the pre-imported launcher
            parts.append(f"vLLM {self.startup_phases['launch']}")
        return f"{self.startup_s:.0f} s" + (": " + ", ".join(parts) if parts else "")

    @property
    def key(self) -> str:
        return params_key(self.params)

    @property
    def label(self) -> str:
        return f"#{self.number}" + (f" {self.reference}" if self.reference else "")

    @property
    def requests_cell(self) -> str:
        """For tables: the requests each run used, '40+40 / 200' (runs joined by '+', profiles
        by ' / ' in the order measured); '-' where no run recorded its stop."""
        cells = ["+".join(str(s.requests) for s in r.stops) for r in self.results.values() if r.stops]
        return " / ".join(cells) or "-"

    @property
    def requests_line(self) -> str:
        """For notes: 'low-concurrency 40+40 precise; high-concurrency 8 ceiling, reached 8 of
        100'; '' where no run recorded its stop."""
        return "; ".join(f"{p} {r.requests_text}" for p, r in self.results.items() if r.stops)

    def reached(self, profile: str) -> str:
        """'reached 8 of 100' where a run of ``profile`` never had its concurrency in flight."""
        return self.results[profile].reached_text if profile in self.results else ""

    def has(self, profile: str, metric: str) -> bool:
        return profile in self.results and bool(self.results[profile].values(metric))

    def value(self, profile: str, metric: str) -> float:
        return self.results[profile].mean(metric)

    def estimate(self, profile: str, metric: str, noise: Noise) -> Estimate:
        """The mean over deployments; ``noise`` is that of one deployment's mean."""
        return self.results[profile].estimate(metric, noise)

    def with_measurement(self, m: Measurement) -> TrialOutcome:
        """This trial with what its deployment measured, as stored: seconds to the ms, the
        message and log tail cut, no metrics of a failed deployment."""
        measured = {f.name: getattr(m, f.name) for f in dataclasses.fields(Measurement)}
        return dataclasses.replace(self, **{k: _as_stored(k, v, m.failure is not None)
                                            for k, v in measured.items()})


def _as_stored(name: str, value: Any, failed: bool) -> Any:
    if name in ("results", "capacity") and failed:
        return {}
    if name == "startup_phases":
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in value.items()}
    if name == "failure_message":
        return value[:2000]
    if name == "log_tail":
        return value[-4000:]
    return round(value, 3) if isinstance(value, float) else value


def _phase_parts(phases: Mapping[str, float | str]) -> list[tuple[float, str]]:
    """(seconds, 'label N') per start-up phase in the order they run, compile with its cache's
    hit or miss, then the unnamed seconds."""
    parts = []
    for phase in PHASES:
        seconds = float(phases.get(phase.key, 0) or 0)
        if seconds:
            cache = f" {phases['compile_cache']}" if phase.key == "compile_s" and phases.get(
                "compile_cache") else ""
            parts.append((seconds, f"{phase.label} {seconds:.0f}{cache}"))
    unnamed = float(phases.get("unnamed_s", 0) or 0)
    return parts + [(unnamed, f"unnamed {unnamed:.0f}")] if unnamed else parts


def startup_summary(trials: Sequence[TrialOutcome]) -> str:
    """'the median of 5 deployments: 75 s: imports 11, ..., unnamed 1 (compile cache: 5 miss)':
    each phase's median (and the ready time's) over the trials that started a server with
    phases recorded, and how often vLLM's compile cache served or missed."""
    started = [t for t in trials if t.startup_s and t.startup_phases]
    if not started:
        return "no deployment recorded its start-up phases"
    keys = [p.key for p in PHASES] + ["unnamed_s"]
    median = {k: statistics.median(float(t.startup_phases.get(k, 0) or 0) for t in started) for k in keys}
    ready = statistics.median(float(t.startup_s or 0) for t in started)
    caches: dict[str, int] = {}
    for t in started:
        cache = str(t.startup_phases.get("compile_cache", "") or "")
        caches[cache] = caches.get(cache, 0) + bool(cache)
    said = ", ".join(f"{n} {cache}" for cache, n in caches.items() if n)
    return (f"the median of {len(started)} deployment{'s' * (len(started) > 1)}: "
            + TrialOutcome(-1, startup_s=ready, startup_phases=median).startup_detail
            + (f" (compile cache: {said})" if said else ""))


_FROM_OPTUNA = ("number", "state", "params")  # Optuna keeps these itself
_NOT_STORED = (*_FROM_OPTUNA, "files")  # files: uploaded as the trial's artifacts


def to_attrs(outcome: TrialOutcome) -> dict[str, Any]:
    """The outcome as user attributes: every field that differs from its default, under its
    own name (``failure`` as ``failure_class``, ``results`` as ``repeats`` and, where runs
    recorded how they ended, ``stops``), plus per-profile ``metrics`` (means) and ``spread``
    for people reading the dashboard."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(TrialOutcome):
        value = getattr(outcome, f.name)
        if f.name in _NOT_STORED or value == _default(f):
            continue
        if f.name == "results":
            out["repeats"] = {p: [dict(r) for r in res.runs] for p, res in value.items()}
            out["metrics"] = {p: res.means() for p, res in value.items()}
            out["spread"] = {p: {m: round(res.spread(m), 4) for m in SUMMARY_METRICS
                                 if res.values(m)} for p, res in value.items()}
            stops = {p: [s.to_dict() for s in res.stops] for p, res in value.items() if res.stops}
            if stops:
                out["stops"] = stops
        elif f.name == "failure":
            out["failure_class"] = value.name
        elif f.name == "capacity":
            out["capacity"] = {p: search.to_dict() for p, search in value.items()}
        elif isinstance(value, tuple):
            out[f.name] = list(value)
        elif isinstance(value, Mapping):
            out[f.name] = dict(value)
        else:
            out[f.name] = value
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def from_attrs(number: int, state: str, params: Mapping[str, Value],
               attrs: Mapping[str, Any], retry_of: int | None = None) -> TrialOutcome:
    """The outcome stored in ``attrs`` (as ``to_attrs`` wrote it, or by an older autotune that
    kept only ``metrics`` means)."""
    names = {f.name for f in dataclasses.fields(TrialOutcome)} - set(_NOT_STORED)
    kwargs: dict[str, Any] = {k: attrs[k] for k in names & set(attrs)
                              if k not in ("results", "failure", "capacity")}
    for k in ("argv", "derived", "entrypoint"):
        if k in kwargs:
            kwargs[k] = tuple(kwargs[k])
    if "repeats" in attrs:
        stops = attrs.get("stops", {})
        kwargs["results"] = {p: ProfileResult(p, tuple(runs), tuple(
            RunStop.from_dict(s) for s in stops.get(p, ()))) for p, runs in attrs["repeats"].items()}
    elif "metrics" in attrs:
        kwargs["results"] = {p: ProfileResult(p, (m,)) for p, m in attrs["metrics"].items()}
    if "capacity" in attrs:
        kwargs["capacity"] = {p: CapacitySearch.from_dict(d) for p, d in attrs["capacity"].items()}
    failure = attrs.get("failure_class")
    if failure:
        kwargs["failure"] = failures.failure_class(failure)
    return TrialOutcome(number=number, state=state, params=dict(params), retry_of=retry_of,
                        **kwargs)
