"""Optuna trials as analysis records: the one place that reads autotune's trial attributes."""

from __future__ import annotations

import math

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.analysis import TrialRecord


def feasible(trial: FrozenTrial) -> bool:
    """COMPLETE, every constraint met, and finite objective values."""
    return trial.state == TrialState.COMPLETE and all(
        v <= 0 for v in trial.constraints.values()
    ) and all(math.isfinite(v) for v in trial.values)


def to_record(t: FrozenTrial) -> TrialRecord:
    ok = feasible(t)
    return TrialRecord(
        number=t.number, params=dict(t.params),
        metrics=t.user_attrs.get("metrics", {}) if ok else {},
        spread=t.user_attrs.get("spread", {}), feasible=ok,
        reference=t.user_attrs.get("reference", ""),
        failure_class=t.user_attrs.get("failure_class", "" if ok else (
            "slo_violated" if t.state == TrialState.COMPLETE else "")),
        failure_message=t.user_attrs.get("failure_message", ""),
    )


def records(study: optuna.Study) -> list[TrialRecord]:
    """Every finished trial (COMPLETE, and FAIL for the failure table)."""
    return [to_record(t) for t in study.get_trials(
        deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))]


def baseline_of(study: optuna.Study, recs: list[TrialRecord]) -> TrialRecord | None:
    """The trial of the study's baseline reference, if it ran."""
    name = study.user_attrs.get("baseline")
    return next((r for r in recs if name and r.reference == name), None)


def profiles_of(study: optuna.Study) -> list[str]:
    names = study.metric_names or []
    return list(dict.fromkeys(n.split(":", 1)[0] for n in names))
