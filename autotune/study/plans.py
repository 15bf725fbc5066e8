"""A study's plan: built in one place, stored in the study, rebuilt from it.

``build_plan`` turns a ``PlanRequest`` (what `run` asks for, or what a study stored) into a
``StudyPlan``: the search space, the model (generated on the CPU build when none is given),
the profiles, objectives and SLOs, the budget and the storage. `autotune run`, `autotune
worker` (another node, same storage) and the dry run all call it; `worker` and the dry run
with ``describe_only`` never write a model.

The plan is stored in the study as a ``core.stored_plan.StoredPlan`` (a user attribute, JSON),
so that every worker runs exactly the trials that `run` defined; readers take the objectives,
profiles and vLLM's defaults from it. This module is the only code that reads or writes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.core.analysis.stored_plan import StoredPlan
from autotune.core.metrics.slo import Slo
from autotune.core.space.model_facts import ModelInfo
from autotune.core.space.search_space import ModelContext, ReferenceSet, SearchSpace
from autotune.core.space.space_yaml import parse_space
from autotune.core.trial.objectives import Objective, default_objectives, parse_objective, split_slos
from autotune.core.workload.profiles import WorkloadProfile
from autotune.errors import ConfigError, StudyError
from autotune.shell.files import read_model_info, read_references, read_space, shipped
from autotune.shell.workloads import load_tokenizer, sources_for
from autotune.study.samplers import SAMPLERS
from autotune.study.storage import check_url, storage_url
from autotune.study.trial import BenchPlan

DEFAULT_SPACE = "search_spaces/reference.yaml"
DEFAULT_REFERENCES = "search_spaces/references.yaml"
GENERATED_MODEL = "models/tiny-moe-mtp-trained-seed0"  # under the workdir
PLAN_ATTR = "plan"
BUDGET_ATTR = "budget"
TIME_BUDGET_ATTR = "time_budget"


@dataclass(frozen=True)
class PlanRequest:
    """What a study is asked to be: from `run`'s flags, or from a plan stored in a study."""

    workdir: Path
    profiles: tuple[WorkloadProfile, ...]
    model: str | None = None  # None: the generated model (CPU build only)
    space_path: str = DEFAULT_SPACE
    space_yaml: str | None = None  # a stored plan's space text, instead of reading space_path
    references_path: str | None = None  # given: its references are enqueued first
    trials: int = 10
    repeats: int = 2  # runs per profile per deployment: 2 measure the noise
    seed: int | None = None
    sampler: str = "tpe"
    study_name: str | None = None
    storage: str | None = None  # None: $AUTOTUNE_STORAGE, else the workdir's SQLite file
    objectives: tuple[str, ...] = ()  # PROFILE:METRIC[:min|max]; empty: the default pair
    slos: tuple[str, ...] = ()
    tp: int | None = None
    max_model_len: int | None = None
    confirm: int = 3  # front members confirmed at the end (0: off)
    # Stop measuring a trial once the front beats it beyond the noise. Off by default: on the
    # recorded CPU table it saved no device time (README "Time to an answer").
    race: bool = False
    time_budget_s: float | None = None  # wall clock of the study's trials, confirmation included
    describe_only: bool = False  # a dry run: describe a generated model, do not write it


@dataclass(frozen=True)
class StudyPlan:
    """Everything that decides a study's trials, fixed before the first one."""

    model: ModelInfo
    space: SearchSpace
    bench: BenchPlan
    objectives: tuple[Objective, ...]
    trials: int  # study-wide budget of finished trials
    study_name: str
    storage: str
    workdir: Path  # artifacts and per-trial folders
    max_model_len: int
    references: ReferenceSet | None = None
    seed: int | None = None
    sampler: str = "tpe"
    slos: tuple[Slo, ...] = ()
    confirm: int = 0
    race: bool = False
    time_budget_s: float | None = None

    @property
    def profile_names(self) -> list[str]:
        return [p.name for p in self.bench.profiles]

    @property
    def capacity_profiles(self) -> list[str]:
        return [p.name for p in self.bench.profiles if p.capacity is not None]

    @property
    def ctx(self) -> ModelContext:
        return ModelContext(self.model, self.max_model_len)


def model_info(model: str | None, workdir: Path, *, describe_only: bool = False,
               say: Any = lambda text: None) -> ModelInfo:
    """The given model, or on the CPU build the generated one under ``workdir`` (written the
    first time, unless ``describe_only``)."""
    if model:
        return read_model_info(model)
    from autotune.shell import modelgen
    from autotune.shell.install import detect_platform

    if detect_platform() != "cpu":
        raise ConfigError("--model is required on a GPU machine (a local folder or a cached hub id)")
    path = workdir / GENERATED_MODEL
    if (path / "config.json").exists():
        say(f"using the generated tiny model {path}")
        return read_model_info(str(path))
    if describe_only:
        return modelgen.describe_model(path, kind="moe", mtp=True)
    say(f"no --model given and no GPU: generating a tiny MoE+MTP model in {path}, trained so "
        "that its MTP head predicts (about a minute)")
    return modelgen.make_model(path, kind="moe", mtp=True, seed=0, trained=True)


def default_study_name(model: str, space: str, profiles: list[str]) -> str:
    base = Path(model.rstrip("/")).name or model.replace("/", "-")
    return f"{base}-{space}-{'+'.join(profiles)}"


def build_plan(request: PlanRequest, say: Any = lambda text: None) -> StudyPlan:
    """The one plan constructor. Bad input is a ConfigError before anything is written."""
    names = [p.name for p in request.profiles]
    if len(set(names)) != len(names):
        raise ConfigError(f"--profile: each profile once, got {names}")
    if request.trials < 1 or request.repeats < 1 or request.confirm < 0:
        raise ConfigError("--trials and --repeats must be >= 1, --confirm >= 0")
    if request.sampler not in SAMPLERS:
        raise ConfigError(f"--sampler {request.sampler!r}: valid samplers are {', '.join(SAMPLERS)}")
    if request.tp is not None and request.tp < 1:
        raise ConfigError(f"--tp {request.tp}: must be >= 1")
    storage = storage_url(request.storage, f"sqlite:///{request.workdir / 'autotune.db'}")
    check_url(storage, created_folder=request.workdir)
    space = (parse_space(request.space_yaml, f"{request.space_path} (stored in the study)")
             if request.space_yaml is not None else read_space(shipped(request.space_path)))
    if request.tp:
        space = dataclasses.replace(space, deployment=dataclasses.replace(
            space.deployment, tensor_parallel_size=request.tp))
    references = (read_references(shipped(request.references_path), space)
                  if request.references_path else None)
    slos, limits = split_slos(request.slos, request.profiles)
    profiles = tuple(p.with_limits(limits.get(p.name, ())) if p.capacity else p
                     for p in request.profiles)
    for p in profiles:
        if p.capacity is not None and not p.capacity.limits:
            raise ConfigError(f"--profile {p.name}: a capacity profile needs at least one SLO, "
                              f"e.g. --slo '{p.name}:p99_ttft_ms<=2000' (or slo: in its profile file)")
    objectives = (tuple(parse_objective(o, names) for o in request.objectives)
                  or default_objectives(profiles))
    if len({o.name for o in objectives}) != len(objectives):
        raise ConfigError(f"--objective: each objective once, got {[o.name for o in objectives]}")
    model = model_info(request.model, request.workdir, describe_only=request.describe_only,
                       say=say)
    max_model_len = request.max_model_len or space.deployment.max_model_len or model.native_context
    tokenizer = load_tokenizer(model.name)
    if tokenizer is None and request.describe_only and any(p.dataset for p in profiles):
        say("datasets are read once the model exists (a dry run does not make it)")
        sources: dict = {}
    else:
        profiles, sources = sources_for(profiles, vocab_size=model.vocab_size, tokenizer=tokenizer,
                                        max_model_len=max_model_len)
    return StudyPlan(
        model=model, space=space, objectives=objectives,
        bench=BenchPlan(profiles=profiles, sources=sources, repeats=request.repeats,
                        seed=request.seed or 0, objectives=objectives),
        trials=request.trials,
        study_name=request.study_name or default_study_name(model.name, space.name, names),
        storage=storage, workdir=request.workdir, max_model_len=max_model_len,
        references=references, seed=request.seed, sampler=request.sampler, slos=slos,
        confirm=request.confirm, race=request.race, time_budget_s=request.time_budget_s,
    )


def stored_plan_of(plan: StudyPlan) -> StoredPlan:
    return StoredPlan(
        model=plan.model.name, space_path=plan.space.path, space_yaml=plan.space.text,
        tensor_parallel_size=plan.space.deployment.tensor_parallel_size,
        max_model_len=plan.max_model_len, profiles=plan.bench.profiles,
        objectives=tuple(f"{o.name}:{o.direction[:3]}" for o in plan.objectives),
        repeats=plan.bench.repeats, slos=tuple(slo.key for slo in plan.slos), seed=plan.seed,
        sampler=plan.sampler, confirm=plan.confirm, race=plan.race,
        defaults={p.name: p.default for p in plan.space.parameters},
    )


def write_plan(study: optuna.Study, stored: StoredPlan) -> None:
    study.set_user_attr(PLAN_ATTR, stored.to_dict())


def read_plan(study: optuna.Study) -> StoredPlan | None:
    """The plan stored in ``study``; None for a study that autotune did not create."""
    data = study.user_attrs.get(PLAN_ATTR)
    return None if data is None else StoredPlan.from_dict(data, f"study {study.study_name!r}")


def set_budget(study: optuna.Study, trials: int) -> None:
    """The study-wide number of finished trials that workers run to."""
    study.set_user_attr(BUDGET_ATTR, trials)


def set_time_budget(study: optuna.Study, seconds: float | None, started_at: float) -> None:
    """The wall-clock budget of this `run` (every slot's and worker's trials count from its
    start), or none."""
    study.set_user_attr(TIME_BUDGET_ATTR, None if seconds is None else
                        {"seconds": seconds, "started_at": started_at})


def read_time_budget(study: optuna.Study) -> tuple[float | None, float]:
    """(seconds, epoch start) of the study's time budget; (None, 0) without one."""
    found = study.user_attrs.get(TIME_BUDGET_ATTR)
    return (float(found["seconds"]), float(found["started_at"])) if found else (None, 0.0)


def store_plan(study: optuna.Study, plan: StudyPlan) -> None:
    """Record the plan on a new study, or check that it matches the one stored."""
    new = stored_plan_of(plan)
    old = read_plan(study)
    if old is not None:
        stored = {p.name: p.dataset for p in old.profiles if p.dataset is not None}
        for p in new.profiles:
            was = stored.get(p.name)
            if p.dataset is not None and was is not None and was.sha256 != p.dataset.sha256:
                raise ConfigError(
                    f"{p.dataset.path}: its content changed since study {plan.study_name!r} was "
                    f"created (sha256 {was.sha256[:12]}… then, {p.dataset.sha256[:12]}… now): use "
                    "the file the study was created with, or start another --study")
        differ = old.differences(new)
        if differ:
            raise ConfigError(
                f"study {plan.study_name!r} was created with other settings ({', '.join(differ)} "
                "differ): join it with `autotune worker --study NAME`, which uses the stored "
                "plan, or pick another --study name"
            )
    write_plan(study, new)
    set_budget(study, plan.trials)


def stored_request(study: optuna.Study, *, storage: str, workdir: Path, model: str | None,
                   trials: int | None) -> PlanRequest:
    """The request a study's stored plan makes, for a worker that joins it. ``model``
    overrides the stored model path (a node that keeps it elsewhere); ``trials`` sets the
    study's budget."""
    stored = read_plan(study)
    if stored is None or not stored.runnable:
        raise StudyError(f"study {study.study_name!r} has no stored plan: it was not created by "
                         "`autotune run`; start it with `autotune run --storage ... --study NAME`")
    budget = trials if trials is not None else int(study.user_attrs.get(BUDGET_ATTR, 0))
    return PlanRequest(
        workdir=workdir, profiles=stored.profiles,
        model=model or stored.model, space_path=stored.space_path,
        space_yaml=stored.space_yaml, trials=budget, repeats=stored.repeats,
        seed=stored.seed, sampler=stored.sampler, study_name=study.study_name,
        storage=storage, objectives=stored.objectives, slos=stored.slos,
        tp=stored.tensor_parallel_size, max_model_len=stored.max_model_len,
        confirm=stored.confirm, race=stored.race, time_budget_s=read_time_budget(study)[0],
    )
