"""The rows every reading command shows, one record per row (``TrialRecord``, ``FrontRecord``,
``RecommendationRecord``, ``StudyRecord``), from ``StudyData`` and the analysis records: tables,
report and dashboard notes render these records, so that a trial reads the same everywhere.
``--format json`` walks them (``to_json``), ``--format csv`` lays them out by ``CSV_COLUMNS``;
docs/outputs.md is the schema, checked by tests/cli/test_outputs.py. Computes no finding and
prints nothing."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from autotune.core.analysis.recommendation import Recommendation, Searched, TieCost, searched, use_objectives
from autotune.core.analysis.study_data import StudyData
from autotune.core.deployment import failures
from autotune.core.maths.numbers import number_text
from autotune.core.maths.stats import Comparison, Estimate
from autotune.core.space.search_space import Value
from autotune.core.trial.capacity_search import CapacitySearch
from autotune.core.trial.outcome import TrialOutcome
from autotune.core.trial.precision import RunStop

OUTPUT_FORMATS = ("table", "json", "csv")
SCHEMA = 3  # docs/outputs.md; raised when a field changes meaning or goes away


@dataclass(frozen=True)
class Interval:
    """A metric's mean over ``deployments`` with its 95% interval [``lo``, ``hi``]; ``noise``
    says where the interval's noise comes from ('assumed', or how it was measured)."""

    mean: float
    lo: float
    hi: float
    deployments: int
    noise: str

    @classmethod
    def of(cls, e: Estimate) -> Interval:
        return cls(e.mean, e.low, e.high, e.n, "assumed" if e.noise.assumed else e.noise.source)

    @property
    def text(self) -> str:
        """'1,256 [1,230, 1,283]': as every table writes it (``Estimate.text``)."""
        m = self.mean
        return f"{number_text(m)} [{number_text(self.lo, m)}, {number_text(self.hi, m)}]"


@dataclass(frozen=True)
class VerdictRecord:
    """A row against the baseline (or a rival) on one metric: its relative change in percent
    (``change_pct``, with the 95% interval ``change_lo_pct`` .. ``change_hi_pct``; negative is
    lower, in the metric's own direction), the same change in the metric's own unit
    (``difference``: the row's mean less the other's), the 90% interval equivalence is judged
    on, the margin (the smallest difference, in percent) and the verdict: better, worse,
    equivalent or undecided."""

    verdict: str
    difference: float
    change_pct: float
    change_lo_pct: float
    change_hi_pct: float
    tost_lo_pct: float
    tost_hi_pct: float
    margin_pct: float

    @classmethod
    def of(cls, c: Comparison, mean: float) -> VerdictRecord:
        """``c`` (the row against the other), the row's mean being ``mean``."""
        other = mean / (1 + c.change.pct / 100) if c.change.pct > -100 else math.nan
        return cls(c.verdict.value, mean - other, c.change.pct, c.change.low_pct,
                   c.change.high_pct, c.tost.low_pct, c.tost.high_pct, c.margin_pct)

    @property
    def change_text(self) -> str:
        """'+0.8% [-1.2, +2.9]'."""
        return f"{self.change_pct:+.1f}% [{self.change_lo_pct:+.1f}, {self.change_hi_pct:+.1f}]"

    @property
    def text(self) -> str:
        """'better: -20.0% [-22.1, -17.8]', or for equivalence its 90% interval and margin."""
        if self.verdict == "equivalent":
            return (f"equivalent: {self.change_pct:+.1f}%, 90% interval [{self.tost_lo_pct:+.1f}, "
                    f"{self.tost_hi_pct:+.1f}] within +/-{self.margin_pct:g}%")
        return f"{self.verdict}: {self.change_text}"


@dataclass(frozen=True)
class ProfileRecord:
    """One profile's runs of one trial: every metric the runs recorded (vLLM's keys) with its
    interval, how many runs and deployments, and how each run stopped (in order)."""

    metrics: Mapping[str, Interval]
    runs: int
    deployments: int
    stops: tuple[RunStop, ...] = ()


@dataclass(frozen=True)
class TrialRecord:
    """One trial as `autotune trials` lists it. ``outcome``: ok, raced, dominated, a failure
    class (core.deployment.failures) or Optuna's state; ``served``: ``TrialOutcome.served``;
    ``flags``: what follows ``vllm serve MODEL`` (as everywhere)."""

    number: int
    state: str
    outcome: str
    reference: str
    served: bool
    feasible: bool
    on_front: bool
    confirmed: bool
    params: Mapping[str, Value]
    changes: Mapping[str, Value]  # what differs from the baseline (vLLM's defaults without one)
    model: str
    flags: tuple[str, ...]
    failure_message: str
    startup_s: float | None
    startup_phases: Mapping[str, float | str]
    trial_wall_s: float | None
    profiles: Mapping[str, ProfileRecord]
    capacity: Mapping[str, CapacitySearch] = field(default_factory=dict)

    def metric(self, profile: str, metric: str) -> Interval | None:
        p = self.profiles.get(profile)
        return None if p is None else p.metrics.get(metric)


@dataclass(frozen=True)
class FrontRecord:
    """One member of the front: each objective (``PROFILE:METRIC``) with its interval, against
    the baseline (None: no baseline, or it is the baseline), its capacity, its changes."""

    number: int
    reference: str
    confirmed: bool
    objectives: Mapping[str, Interval]
    vs_baseline: Mapping[str, VerdictRecord | None]
    capacity: Mapping[str, CapacitySearch]
    differs_from: str
    changes: Mapping[str, Value]
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Undecided:
    """The pick against an undecided rival on one objective (its change against the rival)."""

    trial: int
    objective: str
    change_pct: float
    change_lo_pct: float
    change_hi_pct: float


@dataclass(frozen=True)
class DecideRecord:
    """What deciding the undecided comparisons takes (``TieCost``): ``rounds`` confirmation
    rounds of ``trials`` that separate ``smallest_difference_pct`` with chance ``power``, the
    ``deployments`` they make, their price ``seconds`` (None: no deployment measured yet) and
    the ``command`` that runs them."""

    trials: tuple[int, ...]
    objective: str
    smallest_difference_pct: float
    power: float
    rounds: int
    deployments: int
    seconds: float | None
    beyond_budget: bool
    command: str
    observed: tuple[Undecided, ...]

    @classmethod
    def of(cls, c: TieCost) -> DecideRecord:
        return cls(c.trials, c.objective, c.smallest_difference_pct, c.power, c.rounds,
                   c.deployments, c.seconds, c.beyond_budget, c.command,
                   tuple(Undecided(o.trial, o.objective, o.change.pct, o.change.low_pct,
                                   o.change.high_pct) for o in c.observed))


@dataclass(frozen=True)
class RecommendationRecord:
    """The pick for one use (``trial`` None where nothing is feasible yet: ``reason`` says
    why); ``is_baseline``: the pick is the baseline (keep what you run); ``verdict``: the
    pick against the baseline (better, worse, equivalent, undecided; '' for the baseline
    itself or without one); ``configurations_measured`` and ``searched``: how much the study
    measured behind the answer (``Searched``)."""

    use: str
    trial: int | None
    reference: str
    is_baseline: bool
    verdict: str
    objectives: Mapping[str, Interval]
    comparisons: Mapping[str, VerdictRecord]  # the pick against the baseline, per objective
    undecided_against: tuple[int, ...]
    decide: DecideRecord | None
    configurations_measured: int
    searched: int
    smallest_difference_pct: float
    flags: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class StudyRecord:
    """One study of a storage: its finished trials counted apart (served:
    ``TrialOutcome.served``; rejected: vLLM refused the flags; failed: every other failure, an
    SLO missed included), the front's size (None: the study has no objectives stored), and
    the distinct configurations it measured (``Searched``)."""

    study: str
    trials: int
    served: int
    rejected: int
    failed: int
    unfinished: int  # running or waiting
    front: int | None
    configurations_measured: int
    searched: int
    created: str


# ------------------------------------------------------------------ building the records


def profile_record(data: StudyData, t: TrialOutcome, profile: str) -> ProfileRecord:
    result = t.results[profile]
    metrics = list(dict.fromkeys(k for run in result.runs for k in run))
    return ProfileRecord(
        metrics={m: Interval.of(data.estimate(t, profile, m)) for m in metrics
                 if _finite(result.values(m))},
        runs=len(result.runs), deployments=len(result.deployment_sizes) or 1, stops=result.stops)


def _finite(values: Sequence[float]) -> bool:
    return bool(values) and all(math.isfinite(v) for v in values)


def trial_record(data: StudyData, t: TrialOutcome) -> TrialRecord:
    front = {f.number for f in data.front()}
    return TrialRecord(
        number=t.number, state=t.state, outcome=t.status, reference=t.reference,
        served=t.served,
        feasible=t.feasible, on_front=t.number in front, confirmed=t.number in data.confirmed,
        params=dict(t.params), changes=dict(data.differences(t)), model=t.model,
        flags=tuple(t.argv),
        failure_message=failures.first_line(t.failure_message, 2000) if t.failure else "",
        startup_s=t.startup_s, startup_phases=dict(t.startup_phases), trial_wall_s=t.trial_wall_s,
        profiles={p: profile_record(data, t, p) for p in t.results}, capacity=dict(t.capacity))


def versus_record(data: StudyData, t: TrialOutcome, profile: str, metric: str
                  ) -> VerdictRecord | None:
    """``t`` against the baseline on one metric (None: no baseline, or ``t`` is it)."""
    found = data.versus_baseline(t, profile, metric)
    return None if found is None else VerdictRecord.of(found, data.estimate(t, profile, metric).mean)


def front_record(data: StudyData, t: TrialOutcome) -> FrontRecord:
    return FrontRecord(
        number=t.number, reference=t.reference, confirmed=t.number in data.confirmed,
        objectives={o.name: Interval.of(data.objective_estimate(t, o)) for o in data.objectives},
        vs_baseline={o.name: versus_record(data, t, o.profile, o.metric)
                     for o in data.objectives},
        capacity=dict(t.capacity), differs_from=data.reference_point,
        changes=dict(data.differences(t)), flags=tuple(t.argv))


def front_records(data: StudyData) -> list[FrontRecord]:
    return [front_record(data, t) for t in data.front()]


def recommendation_record(data: StudyData, rec: Recommendation | str, use: str,
                          smallest_difference: float | None = None) -> RecommendationRecord:
    found: Searched = rec.searched if not isinstance(rec, str) and rec.searched else searched(data)
    margin = 100 * (smallest_difference if smallest_difference is not None
                    else data.smallest_difference)
    if isinstance(rec, str):
        return RecommendationRecord(use, None, "", False, "", {}, {}, (), None, found.measured,
                                    found.searched, margin, (), rec.removeprefix(f"{use}: "))
    t, versus = rec.trial, rec.versus
    compared = versus is not None and not versus.same
    return RecommendationRecord(
        use=rec.use, trial=t.number, reference=t.reference, is_baseline=rec.keep,
        verdict=versus.verdict.value if versus is not None and compared else "",
        objectives={o.name: Interval.of(data.objective_estimate(t, o)) for o in data.objectives},
        comparisons={o.name: VerdictRecord.of(c, data.objective_estimate(t, o).mean)
                     for o, c in zip(use_objectives(data, rec.use), versus.comparisons, strict=True)}
        if versus is not None and compared else {},
        undecided_against=tuple(r.number for r in rec.tied),
        decide=None if rec.tie_cost is None else DecideRecord.of(rec.tie_cost),
        configurations_measured=found.measured, searched=found.searched,
        smallest_difference_pct=100 * rec.smallest_difference, flags=tuple(t.argv),
        reason=rec.reason)


def study_record(name: str, data: StudyData, *, trials: int, unfinished: int,
                 created: str) -> StudyRecord:
    served = [t for t in data.outcomes if t.served]
    rejected = [t for t in data.outcomes if t.failure is failures.CONFIG_REJECTED]
    found = searched(data)
    return StudyRecord(study=name, trials=trials, served=len(served), rejected=len(rejected),
                       failed=len(data.outcomes) - len(served) - len(rejected),
                       unfinished=unfinished,
                       front=len(data.front()) if data.objectives else None,
                       configurations_measured=found.measured, searched=found.searched,
                       created=created)


def study_document(command: str, study: str, data: StudyData, rows: Sequence[Any]) -> dict[str, Any]:
    """A study's `--format json` document: the study, its objectives and baseline, the
    smallest difference in force and how much it measured, then ``rows`` under its key."""
    key = {"pareto": "front", "trials": "trials", "recommend": "recommendations"}[command]
    return {"study": study, "objectives": [o.name for o in data.objectives],
            "baseline": data.baseline.number if data.baseline else None,
            "smallest_difference_pct": 100 * data.smallest_difference, **search_fields(data),
            key: rows}


def search_fields(data: StudyData) -> dict[str, int]:
    """What every reading command's JSON document says of the search behind it."""
    found = searched(data)
    return {"configurations_measured": found.measured, "searched": found.searched}


# ------------------------------------------------------------------ CSV: fixed columns per command

_INTERVAL = ("mean", "lo", "hi", "deployments", "noise")
_CHANGE = ("verdict", "difference", "change_pct", "change_lo_pct", "change_hi_pct", "margin_pct")
_TOST = ("tost_lo_pct", "tost_hi_pct")  # the 90% interval equivalence is judged on
CSV_COLUMNS: Mapping[str, tuple[str, ...]] = {
    # one row per trial, profile and metric (a trial that measured nothing: one row, the
    # profile and metric empty)
    "trials": ("number", "state", "outcome", "reference", "served", "feasible", "on_front",
               "confirmed", "params", "changes", "model", "flags", "failure_message",
               "startup_s", "trial_wall_s", "profile", "metric", *_INTERVAL, "runs",
               "requests", "stop_reasons", "capacity_met", "capacity_missed"),
    # one row per front member and objective
    "pareto": ("number", "reference", "confirmed", "objective", "profile", "metric", *_INTERVAL,
               *_CHANGE, "capacity", "differs_from", "changes", "flags"),
    # one row per use and objective (a use without a pick: one row, the objective empty)
    # ``verdict``: the pick's combined verdict (the JSON's); ``objective_verdict`` and the
    # ``*_pct`` cells: the pick against the baseline on the row's objective
    "recommend": ("use", "trial", "reference", "is_baseline", "verdict", "objective",
                  *_INTERVAL, "objective_verdict", *_CHANGE[1:5], *_TOST, "margin_pct",
                  "undecided_against", "decide_rounds", "decide_s", "decide_command",
                  "configurations_measured", "searched", "smallest_difference_pct", "flags",
                  "reason"),
    "studies": tuple(f.name for f in dataclasses.fields(StudyRecord)),
}


def _words(words: Sequence[str]) -> str:
    return shlex.join(words)


def _params(params: Mapping[str, Value]) -> str:
    """'max_num_seqs=128 yarn=True': one cell of parameters, in a stable order."""
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()))


def _interval_cells(i: Interval | None) -> dict[str, Any]:
    return {} if i is None else {k: getattr(i, k) for k in _INTERVAL}


def _change_cells(c: VerdictRecord | None) -> dict[str, Any]:
    return {} if c is None else {k: getattr(c, k) for k in _CHANGE}


def _capacity_text(search: CapacitySearch) -> str:
    b = search.boundary
    return f"{search.profile} met {'' if b.load is None else f'{b.load:g}'} missed " \
        f"{'' if b.fail_load is None else f'{b.fail_load:g}'}".strip()


def trial_rows(r: TrialRecord) -> list[dict[str, Any]]:
    common = {"number": r.number, "state": r.state, "outcome": r.outcome,
              "reference": r.reference, "served": r.served, "feasible": r.feasible,
              "on_front": r.on_front, "confirmed": r.confirmed, "params": _params(r.params),
              "changes": _params(r.changes), "model": r.model, "flags": _words(r.flags),
              "failure_message": r.failure_message, "startup_s": r.startup_s,
              "trial_wall_s": r.trial_wall_s}
    rows = []
    for name in dict.fromkeys([*r.profiles, *r.capacity]):
        p = r.profiles.get(name)
        cap = r.capacity.get(name)
        per_profile = {"profile": name, "runs": p.runs if p else None,
                       "requests": "+".join(str(s.requests) for s in p.stops) if p else None,
                       "stop_reasons": "+".join(s.reason for s in p.stops) if p else None,
                       "capacity_met": cap.boundary.load if cap else None,
                       "capacity_missed": cap.boundary.fail_load if cap else None}
        for metric, interval in (p.metrics.items() if p and p.metrics else [("", None)]):
            rows.append({**common, **per_profile, "metric": metric, **_interval_cells(interval)})
    return rows or [common]


def front_rows(r: FrontRecord) -> list[dict[str, Any]]:
    common = {"number": r.number, "reference": r.reference, "confirmed": r.confirmed,
              "capacity": "; ".join(_capacity_text(c) for c in r.capacity.values()),
              "differs_from": r.differs_from, "changes": _params(r.changes),
              "flags": _words(r.flags)}
    return [{**common, "objective": name, "profile": name.split(":")[0],
             "metric": name.split(":", 1)[1], **_interval_cells(interval),
             **_change_cells(r.vs_baseline.get(name))}
            for name, interval in r.objectives.items()] or [common]


def recommendation_rows(r: RecommendationRecord) -> list[dict[str, Any]]:
    d = r.decide
    common = {"use": r.use, "trial": r.trial, "reference": r.reference,
              "is_baseline": r.is_baseline, "verdict": r.verdict,
              "undecided_against": " ".join(map(str, r.undecided_against)),
              "decide_rounds": d.rounds if d else None, "decide_s": d.seconds if d else None,
              "decide_command": d.command if d else None,
              "configurations_measured": r.configurations_measured, "searched": r.searched,
              "smallest_difference_pct": r.smallest_difference_pct, "flags": _words(r.flags),
              "reason": r.reason}
    return [{**common, "objective": name, **_interval_cells(interval),
             **_objective_cells(r.comparisons.get(name))}
            for name, interval in r.objectives.items()] or [common]


def _objective_cells(c: VerdictRecord | None) -> dict[str, Any]:
    """A recommend row's cells of the pick against the baseline on its objective: the
    verdict named ``objective_verdict`` (``verdict`` is the pick's combined one), the
    change, and the equivalence test's interval."""
    if c is None:
        return {}
    cells = {k: getattr(c, k) for k in (*_CHANGE, *_TOST)}
    return {"objective_verdict": cells.pop("verdict"), **cells}


def study_rows(r: StudyRecord) -> list[dict[str, Any]]:
    return [{f.name: getattr(r, f.name) for f in dataclasses.fields(r)}]


CSV_ROWS = {"trials": trial_rows, "pareto": front_rows, "recommend": recommendation_rows,
            "studies": study_rows}


# ------------------------------------------------------------------ rendering any record


def to_json(value: Any) -> Any:
    """``value`` as JSON values: a dataclass as its fields, an enum as its value, a mapping as
    an object, a sequence as a list, a path as text, an infinite number as 'inf'/'-inf' and a
    NaN as null (JSON has neither)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    value = to_json(value)
    return "" if value is None else value


def render(command: str, document: Mapping[str, Any], rows: Sequence[Any], fmt: str) -> str:
    """``--format json``: ``document`` (the study's name and such, then the rows under their
    key) as indented JSON; ``--format csv``: ``rows`` laid out in ``CSV_COLUMNS[command]``,
    the same columns in the same order whatever the study holds, an absent value empty."""
    if fmt == "json":
        return json.dumps({"schema": SCHEMA, **to_json(document)}, indent=2, allow_nan=False) + "\n"
    columns = CSV_COLUMNS[command]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n", restval="",
                            extrasaction="raise")
    writer.writeheader()
    for record in rows:
        writer.writerows({k: _cell(v) for k, v in row.items()} for row in CSV_ROWS[command](record))
    return text.getvalue()
