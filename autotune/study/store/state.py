"""A study's own state in its storage: the plan it was asked to do, when its time budget's clock
started, its uid, its measured baseline, whether its references were enqueued and which is the
baseline, the confirmed rounds of its finalists and the spread between deployments it measured.
The one module that reads or writes a study's attributes (a trial's are ``records``'); it
decides nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import optuna

from autotune.core.deployment.baseline import Baseline
from autotune.core.plan.confirmation import ConfirmationState
from autotune.core.plan.study_request import LAYOUT1_TIME_BUDGET, StudyRequest
from autotune.core.trial.outcome import ProfileResult
from autotune.core.trial.precision import RunStop

_PLAN = "plan"
_CLOCK = "time_budget_started_at"  # epoch seconds at which this `run`'s time budget started
_UID = "uid"  # random id of the study, in the trial marker of every server it starts
_REFERENCES = "references_enqueued"
_BASELINE = "baseline"  # the name (a trial's ``reference``) of the trial verdicts compare with
_BASELINE_CONFIG = "baseline_config"  # the measured baseline's record (deployment.baseline.Baseline)
_NOISE = "measured_noise"  # this study's own spread between deployments, and under what
_CONFIRMED = "confirmed"  # trial number -> profile -> one list of runs per deployment, oldest first
_CONFIRMED_STOPS = "confirmed_stops"  # the same layout: how each of those runs ended (RunStop)


def read_plan(study: optuna.Study, attrs: Mapping | None = None) -> StudyRequest | None:
    """The plan stored in ``study``; None for a study that autotune did not create. ``attrs``
    (here and below): the study's attributes, where the caller has read them already (each
    read of ``study.user_attrs`` is a storage query and a deep copy)."""
    attrs = study.user_attrs if attrs is None else attrs
    data = attrs.get(_PLAN)
    return None if data is None else StudyRequest.from_dict(
        data, f"study {study.study_name!r}", beside=attrs)


def write_plan(study: optuna.Study, plan: StudyRequest) -> None:
    study.set_user_attr(_PLAN, plan.to_dict())


def start_clock(study: optuna.Study, now: float) -> None:
    """This `run`'s time budget counts from ``now`` (every slot's and worker's trials)."""
    study.set_user_attr(_CLOCK, now)


def time_budget(study: optuna.Study) -> tuple[float | None, float]:
    """(seconds, epoch start) of the study's time budget; (None, 0) without one."""
    attrs = study.user_attrs
    plan = read_plan(study, attrs)
    seconds = plan.time_budget_s if plan else None
    layout1 = attrs.get(LAYOUT1_TIME_BUDGET) or {}
    started = attrs.get(_CLOCK, layout1.get("started_at", 0.0))
    return (None, 0.0) if seconds is None else (seconds, float(started))


def make_uid(study: optuna.Study) -> None:
    """Give the study its random id, once (by the `run` that creates it)."""
    if _UID not in study.user_attrs:
        study.set_user_attr(_UID, uuid.uuid4().hex)


def uid(study: optuna.Study) -> str:
    return str(study.user_attrs.get(_UID, ""))


def references_enqueued(study: optuna.Study) -> bool:
    return bool(study.user_attrs.get(_REFERENCES))


def mark_references(study: optuna.Study, baseline: str) -> None:
    """The references were enqueued (or imported) once; ``baseline`` names the one the others
    are compared with, unless a measured baseline (``mark_baseline``) already is."""
    study.set_user_attr(_REFERENCES, True)
    if _BASELINE_CONFIG not in study.user_attrs:
        study.set_user_attr(_BASELINE, baseline)


def mark_baseline(study: optuna.Study, record: Baseline) -> None:
    """``record`` was enqueued as the study's first trial: the one every verdict compares with."""
    study.set_user_attr(_BASELINE_CONFIG, record.to_dict())
    study.set_user_attr(_BASELINE, record.name)


def baseline(study: optuna.Study, attrs: Mapping | None = None) -> str | None:
    return (study.user_attrs if attrs is None else attrs).get(_BASELINE)


def baseline_config(study: optuna.Study) -> Baseline | None:
    """The measured baseline's record (None: the study has none, or predates it)."""
    data = study.user_attrs.get(_BASELINE_CONFIG)
    return None if data is None else Baseline.from_dict(data)


def write_noise(study: optuna.Study, record: Mapping) -> None:
    """This study's own measured spread between deployments, with the conditions it holds
    under (``records.store_noise`` computes it)."""
    study.set_user_attr(_NOISE, dict(record))


def noise_of_attrs(user_attrs: Mapping) -> Mapping | None:
    """The stored measured spread of a study, from its attributes (those of every study in a
    storage are read at once: ``records.OthersNoise.read``)."""
    return user_attrs.get(_NOISE)


def _groups(stored: list) -> list[list[dict]]:
    """The runs of one trial and profile as stored, one list per deployment. The older flat
    layout (a list of runs) did not record which runs shared a deployment: it is read as ONE
    deployment, the conservative reading (fewer deployments: a wider interval, and its runs'
    spread counted as repeats, never as the spread between deployments)."""
    if stored and all(isinstance(r, dict) for r in stored):
        return [list(stored)]
    return [list(g) for g in stored if g]


def read_confirmed(study: optuna.Study, attrs: Mapping | None = None
                   ) -> dict[int, dict[str, ProfileResult]]:
    """Per confirmed trial and profile, its confirmed runs with the deployment each came from
    (``ProfileResult.deployment_sizes``)."""
    attrs = study.user_attrs if attrs is None else attrs
    out: dict[int, dict[str, ProfileResult]] = {}
    all_stops = attrs.get(_CONFIRMED_STOPS, {})
    for n, by_profile in attrs.get(_CONFIRMED, {}).items():
        out[int(n)] = {}
        for p, stored in by_profile.items():
            groups = _groups(stored)
            runs = tuple(r for g in groups for r in g)
            stops = tuple(RunStop.from_dict(s) for g in all_stops.get(n, {}).get(p, []) for s in g)
            out[int(n)][p] = ProfileResult(p, runs, stops if len(stops) == len(runs) else (),
                                           deployment_sizes=tuple(len(g) for g in groups))
    return out


def add_confirmed(study: optuna.Study, results: Mapping[int, Mapping[str, ProfileResult]]) -> None:
    """Add one deployment's runs per trial (each call: one deployment of each trial it names)
    to those stored: earlier deployments are kept."""
    stored = {n: {p: _groups(runs) for p, runs in by.items()}
              for n, by in study.user_attrs.get(_CONFIRMED, {}).items()}
    stops = dict(study.user_attrs.get(_CONFIRMED_STOPS, {}))
    for number, by_profile in results.items():
        mine = stored.setdefault(str(number), {})
        my_stops = stops.setdefault(str(number), {})
        for p, res in by_profile.items():
            if res.runs:
                mine.setdefault(p, []).append([dict(r) for r in res.runs])
                # one list per deployment, as the runs: empty where the deployment told none
                my_stops.setdefault(p, []).append([s.to_dict() for s in res.stops])
    study.set_user_attr(_CONFIRMED, stored)
    study.set_user_attr(_CONFIRMED_STOPS, stops)


_CONFIRMATION = "confirmation"  # the last confirmation's schedule and the deployments it finished


def read_confirmation(study: optuna.Study) -> ConfirmationState:
    """The stored plan and progress of the study's last confirmation (an empty one before
    any)."""
    return ConfirmationState.from_dict(study.user_attrs.get(_CONFIRMATION, {}))


def write_confirmation(study: optuna.Study, confirmation: ConfirmationState) -> None:
    study.set_user_attr(_CONFIRMATION, confirmation.to_dict())
