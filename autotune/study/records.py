"""Optuna trials to and from ``TrialOutcome`` records, and a study's data for analysis.

The one place that writes and reads autotune's trial attributes (``core.trial.outcome`` spells
them); the study's own attributes are ``study.state``'s.
"""

from __future__ import annotations

import dataclasses
import statistics

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.trial.outcome import TrialOutcome, from_attrs, to_attrs
from autotune.study import optuna_internals
from autotune.study.state import baseline, read_confirmed, read_plan

TRIAL_ENV = "AUTOTUNE_TRIAL"  # <study uid>:<trial number>, on each trial's server processes
FINISHED = (TrialState.COMPLETE, TrialState.FAIL)


def write_outcome(trial: optuna.Trial, outcome: TrialOutcome) -> None:
    """Store ``outcome`` on a running trial (called again as it gains fields)."""
    for key, value in to_attrs(outcome).items():
        trial.set_user_attr(key, value)


def read_outcome(t: FrozenTrial) -> TrialOutcome:
    return from_attrs(t.number, t.state.name.lower(), t.params, t.user_attrs,
                      retry_of=optuna_internals.retry_of(t))


def outcomes(study: optuna.Study) -> list[TrialOutcome]:
    """Every finished trial (COMPLETE, and FAIL for the failure table), but copies: a trial
    recorded as the same engine as an earlier one holds that one's values for the sampler
    only, so it counts nowhere (front, noise, effects, importance, finalists)."""
    found = (read_outcome(t) for t in study.get_trials(deepcopy=False, states=FINISHED))
    return [t for t in found if t.same_engine_as is None]


def study_data(study: optuna.Study, *, confirmed: bool = True) -> StudyData:
    """The study's trials, objectives, pooled noise, baseline and vLLM's defaults, read once.
    Where finalists were confirmed (and ``confirmed``), their confirmed numbers replace the
    search's; every other trial keeps its own."""
    found = outcomes(study)
    again = read_confirmed(study) if confirmed else {}
    found = [dataclasses.replace(t, results=again[t.number]) if t.number in again else t
             for t in found]
    name = baseline(study)
    base = next((t for t in found if name and t.reference == name), None)
    plan = read_plan(study)
    return StudyData(outcomes=tuple(found),
                     objectives=plan.parsed_objectives() if plan else (),
                     noise=noise_of(found), baseline=base,
                     defaults=plan.defaults if plan else {},
                     loads={p.name: p.load for p in plan.profiles} if plan else {},
                     repeats=plan.repeats if plan else 1,
                     confirmed=frozenset(t.number for t in found if t.number in again),
                     deployment_s=deployment_seconds(found))


def deployment_seconds(found: list[TrialOutcome]) -> float | None:
    """One deployment's measured cost: the median whole-trial wall time of served trials."""
    walls = [t.trial_wall_s for t in found if t.results and t.trial_wall_s]
    return statistics.median(walls) if walls else None
