"""What the reading commands print for scripts (`--format json|csv`): one record per row, built
from ``StudyData`` and the analysis records, and one generic walker that renders any of them.

The row records (``TrialRecord``, ``FrontRecord``, ``RecommendationRecord``, ``StudyRecord``)
hold the existing records (``RunStop``, ``Comparison``, ``TieCost``, ``CapacitySearch``) and
one of their own, ``Interval`` (a mean with its 95% interval); field names are vLLM's metric
keys and the records' own. ``to_json`` walks any frozen dataclass, mapping or sequence to JSON
values; ``flat`` walks the same records to one CSV row (nested names joined with '.', an
``Interval`` as KEY, KEY_lo, KEY_hi, lists joined with '+'). docs/outputs.md is the schema.
Computes no finding and prints nothing.
"""

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

from autotune.core.analysis.recommend import Recommendation, TieCost, use_objectives
from autotune.core.analysis.study_data import StudyData
from autotune.core.deployment import failures
from autotune.core.maths.stats import Comparison, Estimate
from autotune.core.space.search_space import Value
from autotune.core.trial.capacity_search import CapacitySearch
from autotune.core.trial.outcome import TrialOutcome
from autotune.core.trial.precision import RunStop

OUTPUT_FORMATS = ("table", "json", "csv")
SCHEMA = 1  # docs/outputs.md; raised when a field changes meaning or goes away


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
    class (core.deployment.failures) or Optuna's state; ``served``: ``TrialOutcome.served``."""

    number: int
    state: str
    outcome: str
    reference: str
    served: bool
    feasible: bool
    on_front: bool
    confirmed: bool
    params: Mapping[str, Value]
    model: str
    flags: tuple[str, ...]
    failure_message: str
    startup_s: float | None
    startup_phases: Mapping[str, float | str]
    trial_wall_s: float | None
    profiles: Mapping[str, ProfileRecord]
    capacity: Mapping[str, CapacitySearch] = field(default_factory=dict)


@dataclass(frozen=True)
class FrontRecord:
    """One member of the front: each objective (``PROFILE:METRIC``) with its interval, against
    the baseline (None: no baseline, or it is the baseline), its capacity, its changes."""

    number: int
    reference: str
    confirmed: bool
    objectives: Mapping[str, Interval]
    vs_baseline: Mapping[str, Comparison | None]
    capacity: Mapping[str, CapacitySearch]
    differs_from: str
    changes: Mapping[str, Value]


@dataclass(frozen=True)
class RecommendationRecord:
    """The pick for one use (None where nothing is feasible yet: ``reason`` says why)."""

    use: str
    trial: int | None
    reference: str
    objectives: Mapping[str, Interval]
    vs_baseline: str  # better | worse | equivalent | undecided | keep (the pick is the baseline) | ''
    comparisons: Mapping[str, Comparison]  # the pick against the baseline, per objective
    undecided_against: tuple[int, ...]
    tie_cost: TieCost | None
    flags: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class StudyRecord:
    """One study of a storage: its finished trials counted apart (served:
    ``TrialOutcome.served``; rejected: vLLM refused the flags; failed: every other failure, an
    SLO missed included), the front's size (None: the study has no objectives stored)."""

    study: str
    trials: int
    served: int
    rejected: int
    failed: int
    unfinished: int  # running or waiting
    front: int | None
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
        params=dict(t.params), model=t.model, flags=tuple(t.argv),
        failure_message=failures.first_line(t.failure_message, 2000) if t.failure else "",
        startup_s=t.startup_s, startup_phases=dict(t.startup_phases), trial_wall_s=t.trial_wall_s,
        profiles={p: profile_record(data, t, p) for p in t.results}, capacity=dict(t.capacity))


def front_records(data: StudyData) -> list[FrontRecord]:
    return [FrontRecord(
        number=t.number, reference=t.reference, confirmed=t.number in data.confirmed,
        objectives={o.name: Interval.of(data.objective_estimate(t, o)) for o in data.objectives},
        vs_baseline={o.name: data.versus_baseline(t, o.profile, o.metric) for o in data.objectives},
        capacity=dict(t.capacity), differs_from=data.reference_point,
        changes=dict(data.differences(t))) for t in data.front()]


def recommendation_record(data: StudyData, rec: Recommendation | str, use: str) -> RecommendationRecord:
    if isinstance(rec, str):
        return RecommendationRecord(use, None, "", {}, "", {}, (), None, (),
                                    rec.removeprefix(f"{use}: "))
    t, versus = rec.trial, rec.versus
    names = [o.name for o in use_objectives(data, rec.use)]  # the objectives versus compares on
    return RecommendationRecord(
        use=rec.use, trial=t.number, reference=t.reference,
        objectives={o.name: Interval.of(data.objective_estimate(t, o)) for o in data.objectives},
        vs_baseline="" if versus is None else "keep" if versus.same else versus.verdict.value,
        comparisons=dict(zip(names, versus.comparisons, strict=True)) if versus and not versus.same else {},
        undecided_against=tuple(r.number for r in rec.tied), tie_cost=rec.tie_cost,
        flags=tuple(t.argv), reason=rec.reason)


def study_record(name: str, data: StudyData, *, trials: int, unfinished: int,
                 created: str) -> StudyRecord:
    served = [t for t in data.outcomes if t.served]
    rejected = [t for t in data.outcomes if t.failure is failures.CONFIG_REJECTED]
    return StudyRecord(study=name, trials=trials, served=len(served), rejected=len(rejected),
                       failed=len(data.outcomes) - len(served) - len(rejected),
                       unfinished=unfinished,
                       front=len(data.front()) if data.objectives else None, created=created)


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


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """``value`` as one CSV row: nested names joined with '.', an ``Interval`` as KEY (its
    mean), KEY_lo and KEY_hi, a list of words shell-quoted and joined with spaces, of numbers
    joined with '+', a list of records as each of their fields so joined, None as ''."""
    if isinstance(value, Interval):
        return {prefix: value.mean, f"{prefix}_lo": value.lo, f"{prefix}_hi": value.hi}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        row: dict[str, Any] = {}
        for k, v in value.items():
            row.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return row
    if isinstance(value, list | tuple):
        items = [flat(v, prefix) for v in value]
        keys = list(dict.fromkeys(k for item in items for k in item))
        return {k: _joined([item.get(k, "") for item in items]) for k in keys} or {prefix: ""}
    return {prefix: "" if value is None else to_json(value)}


def _joined(values: list[Any]) -> str:
    """A list in one cell: words as a shell would quote them (flags paste back), numbers
    joined with '+' (as the tables write a trial's runs: '40+60')."""
    if all(isinstance(v, str) for v in values):
        return shlex.join(values)
    return "+".join(str(v) for v in values)


def render(document: Mapping[str, Any], rows: Sequence[Any], fmt: str) -> str:
    """``--format json``: ``document`` (the study's name and such, then the rows under their
    key) as indented JSON; ``--format csv``: ``rows`` only, one line each, columns in the
    order they first appear."""
    if fmt == "json":
        return json.dumps({"schema": SCHEMA, **to_json(document)}, indent=2, allow_nan=False) + "\n"
    flats = [flat(r) for r in rows]
    columns = list(dict.fromkeys(k for row in flats for k in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(flats)
    return text.getvalue()
