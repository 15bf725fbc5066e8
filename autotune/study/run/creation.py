"""Creating or joining a study: its objectives, the stored plan, the reference configs
enqueued once; and the dry run (the first trials' argv from an in-memory copy, nothing
written)."""

from __future__ import annotations

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from autotune.core.deployment.flags import to_argv
from autotune.core.space.search_space import resolve_references, sample
from autotune.errors import StudyError
from autotune.study.run.planning import StudyPlan, store_plan
from autotune.study.run.samplers import make_sampler
from autotune.study.store.state import make_uid, mark_references, references_enqueued
from autotune.study.store.storage import Heartbeat, open_storage, storage_errors


def prepare_study(plan: StudyPlan, heartbeat: Heartbeat, storage: BaseStorage | None = None
                  ) -> tuple[optuna.Study, list[str], bool]:
    """Create the study, or join it when it exists; store the plan; enqueue the references
    once for the study (by whichever `run` created it). Returns the study, messages for the
    user, and whether this call created it."""
    storage = storage or open_storage(plan.storage, heartbeat)
    names = [o.name for o in plan.objectives]
    with storage_errors(f"--storage: cannot create or load study {plan.study_name!r}"):
        try:
            study = optuna.create_study(study_name=plan.study_name, storage=storage,
                                        directions=[o.direction for o in plan.objectives])
            study.set_metric_names(names)
            created = True
        except DuplicatedStudyError:
            study = optuna.load_study(study_name=plan.study_name, storage=storage)
            created = False
        if study.metric_names != names:
            raise StudyError(
                f"study {plan.study_name!r} has objectives {study.metric_names}, this run asks for "
                f"{names}; use the same --profile/--objective list or another --study name")
        store_plan(study, plan)
        make_uid(study)
        return study, enqueue_references(study, plan, created), created


def enqueue_references(study: optuna.Study, plan: StudyPlan, created: bool = True) -> list[str]:
    """Enqueue the applicable references once per study: by the `run` that created it, or
    into a study that has none and no trials yet. Returns messages for skipped ones."""
    if plan.references is None:
        return []
    if references_enqueued(study) or (study.trials and not created):
        return []
    notes = []
    for ref in resolve_references(plan.space, plan.ctx, plan.references.configs):
        if ref.skipped:
            notes.append(f"reference {ref.name}: skipped, {ref.skipped}")
            continue
        study.enqueue_trial(dict(ref.params), user_attrs={"reference": ref.name})
    mark_references(study, plan.references.baseline)
    return notes


def dry_run_argv(plan: StudyPlan, count: int) -> list[tuple[str, list[str]]]:
    """The argv of the first ``count`` trials (references first), from an in-memory copy of
    the study: nothing is launched or written."""
    study = optuna.create_study(directions=[o.direction for o in plan.objectives],
                                sampler=make_sampler(plan.seed, plan.sampler))
    enqueue_references(study, plan)
    out = []
    for _ in range(count):
        trial = study.ask()
        params = sample(plan.space, plan.ctx, trial)
        label = trial.user_attrs.get("reference") or "sampled"
        out.append((f"trial {trial.number} ({label})", to_argv(plan.space, plan.ctx, params)))
        study.tell(trial, state=TrialState.FAIL)
    return out
