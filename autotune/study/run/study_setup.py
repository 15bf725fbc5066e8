"""Creating or joining a study: its objectives, the stored plan, the reference configs
enqueued once; and the dry run (the first trials' argv from an in-memory copy, nothing
written)."""

from __future__ import annotations

import optuna
from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from autotune.core.deployment.baseline import Baseline
from autotune.core.deployment.flags import to_argv
from autotune.core.space.search_space import Params, params_key, resolve_references, sample
from autotune.errors import StudyError
from autotune.study.run.samplers import make_sampler
from autotune.study.run.study_plan import StudyPlan, store_plan
from autotune.study.store.state import (
    baseline_config,
    make_uid,
    mark_baseline,
    mark_references,
    references_enqueued,
)
from autotune.study.store.storage import Heartbeat, open_storage, storage_errors

EXPLORED = "explored"  # a trial's user attribute: its place and reason in the exploration order


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
    """Enqueue, once per study (by the `run` that created it, or into a study that has no trials
    yet), the baseline first (what the user runs today; every verdict compares with it), then
    the exploration order (``plan.exploration``), then the applicable references
    (`--seed-references`). Returns messages for skipped ones."""
    if plan.references is None and plan.baseline is None:
        return []
    if references_enqueued(study) or baseline_config(study) is not None or (
            study.trials and not created):
        return []
    notes = []
    base = plan.baseline
    if base is not None:
        study.enqueue_trial(dict(base.params), user_attrs={"reference": base.name})
        mark_baseline(study, base)
    queued = set()
    for i, candidate in enumerate(plan.exploration, 1):  # what is likeliest to beat the baseline
        study.enqueue_trial(dict(candidate.params), user_attrs={EXPLORED: f"{i}. {candidate.text}"})
        queued.add(params_key(candidate.params))
    if plan.references is None:
        return notes
    for ref in resolve_references(plan.space, plan.ctx, plan.references.configs):
        if base is not None and ref.name == base.name:
            continue  # the baseline itself, enqueued above
        if ref.skipped:
            notes.append(f"reference {ref.name}: skipped, {ref.skipped}")
            continue
        if params_key(ref.params) in queued:
            notes.append(f"reference {ref.name}: already in the exploration order")
            continue
        study.enqueue_trial(dict(ref.params), user_attrs={"reference": ref.name})
    mark_references(study, plan.references.baseline)
    return notes


def dry_run_argv(plan: StudyPlan, count: int) -> list[tuple[str, list[str]]]:
    """The argv of the first ``count`` trials (the baseline, the exploration order, then the
    references), from an
    in-memory copy of the study: nothing is launched or written."""
    study = optuna.create_study(directions=[o.direction for o in plan.objectives],
                                sampler=make_sampler(plan.seed, plan.sampler))
    enqueue_references(study, plan)
    out = []
    for _ in range(count):
        trial = study.ask()
        _, argv = trial_flags(plan, trial, plan.baseline)
        label = (trial.user_attrs.get("reference") or
                 (f"exploration {trial.user_attrs[EXPLORED]}" if EXPLORED in trial.user_attrs
                  else "sampled"))
        if plan.baseline is not None and label == plan.baseline.name and trial.number == 0:
            label = f"baseline: {label}"
        out.append((f"trial {trial.number} ({label})", argv))
        study.tell(trial, state=TrialState.FAIL)
    return out


def trial_flags(plan: StudyPlan, trial: optuna.Trial, baseline: Baseline | None
                ) -> tuple[Params, list[str]]:
    """A trial's parameters and argv: the baseline's own (its context, its argv: vLLM's
    defaults deploy without --max-model-len) for the baseline's enqueued trial, else sampled
    in the study's context."""
    if baseline is not None and trial.user_attrs.get("reference") == baseline.name:
        params = sample(plan.space, baseline.context(plan.ctx), trial)
        if params == dict(baseline.params):
            return params, list(baseline.argv)
    try:
        params = sample(plan.space, plan.ctx, trial)
    except ValueError as exc:  # Optuna: "CategoricalDistribution does not support dynamic value space"
        if "dynamic value space" not in str(exc):
            raise
        # A study created before YaRN was fixed on drew it from [false, true]; Optuna keeps a
        # parameter's choices for the whole study, so it goes on drawing it (and vLLM rejecting
        # it off, recorded as before).
        params = sample(plan.space, plan.ctx, trial, pin=False)
    return params, to_argv(plan.space, plan.ctx, params)
