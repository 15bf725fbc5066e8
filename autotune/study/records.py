"""Optuna trials to and from ``TrialOutcome`` records, and a study's data for analysis.

The one place that writes and reads autotune's trial attributes (``core.outcome`` spells them)
and the study-level records beside them: the confirmed measurements of finalists, kept apart
from the search's own numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.trial.outcome import ProfileResult, TrialOutcome, from_attrs, to_attrs
from autotune.study import optuna_internals
from autotune.study.plans import read_plan

CONFIRMED_ATTR = "confirmed"  # study attr: trial number -> profile -> repeat runs
BASELINE_ATTR = "baseline"
REFS_ENQUEUED = "references_enqueued"
UID = "uid"  # random id of the study, in the trial marker of every server it starts
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
    """Every finished trial (COMPLETE, and FAIL for the failure table)."""
    return [read_outcome(t) for t in study.get_trials(deepcopy=False, states=FINISHED)]


def write_confirmed(study: optuna.Study, results: Mapping[int, Mapping[str, ProfileResult]]) -> None:
    stored = dict(study.user_attrs.get(CONFIRMED_ATTR, {}))
    for number, by_profile in results.items():
        stored[str(number)] = {p: [dict(r) for r in res.runs] for p, res in by_profile.items()}
    study.set_user_attr(CONFIRMED_ATTR, stored)


def read_confirmed(study: optuna.Study) -> dict[int, dict[str, ProfileResult]]:
    return {int(n): {p: ProfileResult(p, tuple(runs)) for p, runs in by_profile.items()}
            for n, by_profile in study.user_attrs.get(CONFIRMED_ATTR, {}).items()}


def study_data(study: optuna.Study, *, confirmed: bool = True) -> StudyData:
    """The study's trials, objectives, pooled noise, baseline and vLLM's defaults, read once.
    Where finalists were confirmed (and ``confirmed``), their confirmed numbers replace the
    search's; every other trial keeps its own."""
    found = outcomes(study)
    again = read_confirmed(study) if confirmed else {}
    found = [dataclasses.replace(t, results=again[t.number]) if t.number in again else t
             for t in found]
    name = study.user_attrs.get(BASELINE_ATTR)
    baseline = next((t for t in found if name and t.reference == name), None)
    plan = read_plan(study)
    return StudyData(outcomes=tuple(found),
                     objectives=plan.parsed_objectives() if plan else (),
                     noise=noise_of(found), baseline=baseline,
                     defaults=dict(plan.defaults) if plan else {},
                     loads={p.name: p.load for p in plan.profiles} if plan else {})
