"""A study carries its own plan, so that `autotune worker --study S` on another node runs
exactly the trials that `autotune run` defined: the search space (its YAML text), the model,
the profiles, tensor parallel size, max model len, repeats, SLOs and the trial budget.

The plan is a study user attribute (JSON); nothing here touches processes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.core.model_info import ModelInfo, load_model_info
from autotune.core.objectives import KNOWN_METRICS, Slo, parse_slo
from autotune.core.profiles import WorkloadProfile
from autotune.core.space import ModelContext, ReferenceSet, SearchSpace, parse_space
from autotune.errors import ConfigError, StudyError
from autotune.study.trial import BenchPlan, TrialSetup


@dataclass(frozen=True)
class StudyPlan:
    """Everything that decides a study's trials, fixed before the first one."""

    model: ModelInfo
    space: SearchSpace
    bench: BenchPlan
    trials: int  # study-wide budget of finished trials
    study_name: str
    storage: str
    workdir: Path  # artifacts and per-trial folders
    max_model_len: int
    references: ReferenceSet | None = None
    seed_references: bool = False
    seed: int | None = None
    slos: tuple[Slo, ...] = ()
    setup_defaults: TrialSetup | None = None  # slot, entrypoint, timeout; model/workdir set per trial

    @property
    def profile_names(self) -> list[str]:
        return [p.name for p in self.bench.profiles]

    @property
    def ctx(self) -> ModelContext:
        return ModelContext(self.model, self.max_model_len)


PLAN_ATTR = "plan"
BUDGET_ATTR = "budget"
# What must agree between `run`s that join one study (the budget and seed may change).
SHAPE_KEYS = ("space_yaml", "tensor_parallel_size", "max_model_len", "profiles", "repeats", "slos")


def plan_attr(plan: StudyPlan) -> dict[str, Any]:
    return {
        "model": plan.model.name,
        "space_path": plan.space.path,
        "space_yaml": plan.space.text,
        "tensor_parallel_size": plan.space.deployment.tensor_parallel_size,
        "max_model_len": plan.max_model_len,
        "profiles": [dataclasses.asdict(p) for p in plan.bench.profiles],
        "vocab_size": plan.bench.vocab_size,
        "repeats": plan.bench.repeats,
        "bench_seed": plan.bench.seed,
        "slos": [slo.key for slo in plan.slos],
        "seed": plan.seed,
    }


def store_plan(study: optuna.Study, plan: StudyPlan) -> None:
    """Record the plan on a new study, or check that it matches the one stored."""
    new = plan_attr(plan)
    old = study.user_attrs.get(PLAN_ATTR)
    if old is not None:
        differ = [k for k in SHAPE_KEYS if old.get(k) != new[k]]
        if differ:
            raise ConfigError(
                f"study {plan.study_name!r} was created with other settings ({', '.join(differ)} "
                "differ): join it with `autotune worker --study NAME`, which uses the stored "
                "plan, or pick another --study name"
            )
    study.set_user_attr(PLAN_ATTR, new)
    study.set_user_attr(BUDGET_ATTR, plan.trials)


def load_plan(study: optuna.Study, storage_url: str, *, model: str | None, workdir: Path,
              trials: int | None, setup: TrialSetup) -> StudyPlan:
    """The plan of an existing study, for a worker that joins it. ``model`` overrides the
    stored model path (a node that keeps it elsewhere); ``trials`` sets the study budget."""
    stored = study.user_attrs.get(PLAN_ATTR)
    if stored is None:
        raise StudyError(f"study {study.study_name!r} has no stored plan: it was not created by "
                         "`autotune run`; start it with `autotune run --storage ... --study NAME`")
    space = parse_space(stored["space_yaml"], f"{stored['space_path']} (stored in the study)")
    space = dataclasses.replace(space, deployment=dataclasses.replace(
        space.deployment, tensor_parallel_size=stored["tensor_parallel_size"]))
    info: ModelInfo = load_model_info(model or stored["model"])
    profiles = tuple(WorkloadProfile(**p) for p in stored["profiles"])
    names = [p.name for p in profiles]
    budget = trials if trials is not None else int(study.user_attrs.get(BUDGET_ATTR, 0))
    if trials is not None:
        study.set_user_attr(BUDGET_ATTR, trials)
    return StudyPlan(
        model=info, space=space,
        bench=BenchPlan(profiles=profiles, vocab_size=stored["vocab_size"],
                        repeats=stored["repeats"], seed=stored["bench_seed"]),
        trials=budget, study_name=study.study_name, storage=storage_url, workdir=workdir,
        max_model_len=stored["max_model_len"],
        slos=tuple(parse_slo(s, names, KNOWN_METRICS) for s in stored["slos"]),
        seed=stored["seed"], setup_defaults=dataclasses.replace(setup, model=info.name),
    )
