"""A study's plan: built in one place from the one record of what the study was asked to do.

``build_plan`` turns a ``PlanRequest`` (what `run` asks for, or what a study stored) into a
``StudyPlan``: that request with its open fields filled in (the model, generated on the CPU build
when none is given; the space's text; the objectives), and the facts derived from it (the model's
facts, the search space, the profiles' request sources, the parsed objectives and SLOs).
`autotune run`, `autotune worker` (another node, same storage) and the dry run all call it;
`worker` and the dry run never write a model. The study stores the filled-in request
(``study.store.state``), so that every worker and resumed run rebuilds exactly the plan `run` made.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from autotune.core.deployment.from_flags import (
    VLLM_DEFAULTS,
    Baseline,
    baseline_of_options,
    defaults_baseline,
    options_of_argv,
    reference_baseline,
)
from autotune.core.deployment.graph_cap import capped, graph_capture_cap
from autotune.core.deployment.slots import Slot
from autotune.core.metrics.slo import Slo
from autotune.core.plan.request import PlanRequest
from autotune.core.space.model_facts import ModelInfo
from autotune.core.space.search_space import (
    ModelContext,
    ReferenceSet,
    SearchSpace,
    resolve_references,
)
from autotune.core.space.space_yaml import parse_space
from autotune.core.trial.objectives import Objective, default_objectives, parse_objective, split_slos
from autotune.core.trial.precision import Balance, Pinned, StopRule, pinnable, stops_early
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RequestSource
from autotune.errors import ConfigError, StudyError
from autotune.shell.files import (
    locate_shipped,
    read_flags_file,
    read_model_info,
    read_references,
    read_space,
)
from autotune.shell.install import Entrypoint
from autotune.shell.validation import VllmValidator
from autotune.shell.workloads import WAITS_FOR_THE_MODEL, check_unchanged, load_tokenizer, sources_for
from autotune.study.run.one_trial import BenchPlan, TrialSetup
from autotune.study.run.samplers import SAMPLERS
from autotune.study.store.state import read_plan, write_plan
from autotune.study.store.storage import check_url, storage_url

DEFAULT_REFERENCES = "search_spaces/references.yaml"
GENERATED_MODEL = "models/tiny-moe-mtp-trained-seed0"  # under the workdir


@dataclass(frozen=True)
class StudyPlan:
    """A study's request, filled in, and what follows from it; fixed before the first trial."""

    request: PlanRequest  # every open field filled in: what the study stores
    model: ModelInfo
    space: SearchSpace
    bench: BenchPlan
    objectives: tuple[Objective, ...]
    references: ReferenceSet | None = None
    slos: tuple[Slo, ...] = ()
    baseline: Baseline | None = None  # what the user runs today: the study's first trial

    @property
    def trials(self) -> int:
        return self.request.trials

    @property
    def study_name(self) -> str:
        return str(self.request.study_name)

    @property
    def storage(self) -> str:
        return str(self.request.storage)

    @property
    def workdir(self) -> Path:
        return self.request.workdir

    @property
    def max_model_len(self) -> int:
        return int(self.request.max_model_len or 0)

    @property
    def seed(self) -> int | None:
        return self.request.seed

    @property
    def sampler(self) -> str:
        return self.request.sampler

    @property
    def confirm(self) -> int:
        return self.request.confirm

    @property
    def race(self) -> bool:
        return self.request.race

    @property
    def time_budget_s(self) -> float | None:
        return self.request.time_budget_s

    @property
    def precision_text(self) -> str:
        """One line: where each fixed profile's runs stop and by which rule (docs/precision.md);
        '' where no profile's runs stop early and no --precision 0 was given."""
        target = self.request.precision
        if not self.bench.pinned:
            return "runs send every profile's num_prompts (--precision 0)" if target == 0 else ""
        pins = "; ".join(f"{p} {', '.join(v.metrics)}" for p, v in self.bench.pinned.items())
        every = [p.name for p in self.bench.profiles
                 if p.capacity is None and p.name not in self.bench.pinned]
        rest = f"; {', '.join(every)}: every request (an arrival process)" if every else ""
        balance = next(iter(self.bench.pinned.values())).rule.balance
        if balance is None:
            return (f"runs stop once their 95% intervals are within {float(target) * 100:g}% of "
                    f"their value (--precision): {pins}{rest}")
        return (f"runs stop at the balanced length n* = sigma_w/sigma_b x sqrt(C_d/c_r), where "
                f"more requests buy less than another deployment ({balance.text} until the "
                f"study measures them; --precision X for a target instead): {pins}{rest}")

    @property
    def profile_names(self) -> list[str]:
        return [p.name for p in self.bench.profiles]

    @property
    def capacity_profiles(self) -> list[str]:
        return [p.name for p in self.bench.profiles if p.capacity is not None]

    @property
    def ctx(self) -> ModelContext:
        return ModelContext(self.model, self.max_model_len, platform_fact())

    def trial_setup(self, *, slot: Slot, entrypoint: Entrypoint | None,
                    validator: VllmValidator | None) -> TrialSetup:
        """How this node deploys the plan's trials: on ``slot``, under the plan's start-up
        timeout (each trial and confirmation gets its own folder and model from it)."""
        return TrialSetup(model="", workdir=self.workdir, slot=slot, entrypoint=entrypoint,
                          startup_timeout_s=self.request.startup_timeout_s, validator=validator)


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
        return modelgen.planned_model_info(path, kind="moe", mtp=True)
    say(f"no --model given and no GPU: generating a tiny MoE+MTP model in {path}, trained so "
        "that its MTP head predicts (seconds)")
    return modelgen.make_model(path, kind="moe", mtp=True, seed=0, trained=True)


def platform_fact() -> str:
    """What ``when: {platform: ...}`` sees: ``cpu`` on vLLM's CPU build, else ``gpu``."""
    from autotune.shell.install import detect_platform

    return "cpu" if detect_platform() == "cpu" else "gpu"


def model_context(space: SearchSpace, model: ModelInfo, max_model_len: int | None = None) -> ModelContext:
    """``model`` as the space's parameters see it: at ``max_model_len``, else the space's
    maximum model length, else the model's native context; on the installed vLLM's platform."""
    return ModelContext(model, max_model_len or space.deployment.max_model_len or model.native_context,
                        platform_fact())


def default_study_name(model: str, space: str, profiles: list[str]) -> str:
    """A new study's default name, short enough to type: the model's folder name (up to 32
    characters) and 6 hex digits of the study's shape (that name, space, profiles), distinct
    for each shape and the same on every machine. Only new studies get it: a stored study
    keeps its name (`autotune studies` lists them)."""
    full = Path(model.rstrip("/")).name or model.replace("/", "-")
    shape = hashlib.sha256("\0".join([full, space, *profiles]).encode()).hexdigest()[:6]
    base = full[:32]
    return f"{base}-{shape}"


def build_plan(request: PlanRequest, say: Any = lambda text: None, *,
               dry_run: bool = False) -> StudyPlan:
    """The one plan constructor. Bad input is a ConfigError before anything is written;
    ``dry_run`` describes a generated model without writing it."""
    names = [p.name for p in request.profiles]
    if len(set(names)) != len(names):
        raise ConfigError(f"--profile: each profile once, got {names}")
    if request.trials < 1 or request.repeats < 1 or request.confirm < 0:
        raise ConfigError("--trials and --repeats must be >= 1, --confirm >= 0")
    if request.precision is not None and not 0 <= request.precision < 1:
        raise ConfigError(f"--precision {request.precision:.4g}: a fraction in [0, 1), "
                          "e.g. 1.25% (0: every run sends num_prompts)")
    if request.sampler not in SAMPLERS:
        raise ConfigError(f"--sampler {request.sampler!r}: valid samplers are {', '.join(SAMPLERS)}")
    if request.tp is not None and request.tp < 1:
        raise ConfigError(f"--tp {request.tp}: must be >= 1")
    storage = storage_url(request.storage, f"sqlite:///{request.workdir / 'autotune.db'}")
    check_url(storage, created_folder=request.workdir)
    space = (parse_space(request.space_yaml, f"{request.space_path} (stored in the study)")
             if request.space_yaml is not None else read_space(locate_shipped(request.space_path)))
    if request.tp:
        space = dataclasses.replace(space, deployment=dataclasses.replace(
            space.deployment, tensor_parallel_size=request.tp))
    if request.cap_cuda_graphs:
        space = capped(space, graph_capture_cap(request.profiles, space))
    references = (read_references(locate_shipped(request.references_path), space)
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
    model = model_info(request.model, request.workdir, describe_only=dry_run, say=say)
    max_model_len = model_context(space, model, request.max_model_len).max_model_len
    baseline = resolve_baseline(request, space, ModelContext(model, max_model_len, platform_fact()),
                                references)
    tokenizer = load_tokenizer(model.name)
    waits = tokenizer is None and dry_run
    profiles, sources = sources_for(profiles, vocab_size=model.vocab_size, tokenizer=tokenizer,
                                    max_model_len=max_model_len, structure_only=waits)
    if waits and any(p.dataset for p in profiles):
        say(f"dry run without the model: the datasets' files, formats and fields were checked; "
            f"{WAITS_FOR_THE_MODEL} wait for the model (the first run makes it)")
    filled = dataclasses.replace(
        request, model=model.name, space_yaml=space.text,
        tp=space.deployment.tensor_parallel_size, max_model_len=max_model_len, profiles=profiles,
        objectives=tuple(f"{o.name}:{o.direction[:3]}" for o in objectives),
        slos=tuple(slo.key for slo in slos), storage=storage,
        study_name=request.study_name or default_study_name(model.name, space.name, names))
    return StudyPlan(
        request=filled, model=model, space=space, objectives=objectives, references=references,
        slos=slos, baseline=baseline, bench=BenchPlan(profiles=profiles, sources=sources, repeats=request.repeats,
                                   seed=request.seed or 0, objectives=objectives,
                                   pinned=pinned_metrics(profiles, objectives, slos,
                                                         stop_rule(request), sources)))


def resolve_baseline(request: PlanRequest, space: SearchSpace, ctx: ModelContext,
                     references: ReferenceSet | None) -> Baseline | None:
    """The baseline ``request.baseline`` names: vLLM's defaults; flags (a string starting with
    ``-``); a file as `autotune export` writes it; or the name of a reference configuration
    (of the references file). Anything else, or flags the space cannot express, is a one-line
    ConfigError before anything is written."""
    text = request.baseline
    if text is None:
        return None
    where = f"--baseline {text!r}"
    if text == VLLM_DEFAULTS:
        return defaults_baseline(space, ctx)
    if text.lstrip().startswith("-"):
        options = options_of_argv(shlex.split(text), where)
        return baseline_of_options(space, ctx, options, name="given flags", where=where)
    if Path(text).is_file():
        return baseline_of_options(space, ctx, read_flags_file(text), name=Path(text).name,
                                   where=f"--baseline {text}")
    path = request.baseline_references or request.references_path or DEFAULT_REFERENCES
    refs = references if references is not None and references.path == path else None
    try:
        refs = refs or read_references(locate_shipped(path), space)
    except ConfigError:
        refs = None  # a references file of another space: the name is not found there
    names = [r.name for r in refs.configs] if refs is not None else []
    if text not in names:
        raise ConfigError(f"{where}: not {VLLM_DEFAULTS}, a flag string (--flag value ...), a "
                          f"file, or a reference name in {path} "
                          f"({', '.join(names) or 'none readable'})")
    found = next(r for r in resolve_references(space, ctx, refs.configs) if r.name == text)
    if found.skipped:
        raise ConfigError(f"{where}: reference {text!r} {found.skipped}")
    return reference_baseline(space, ctx, text, found.params)


# What a fixed profile that no objective or SLO uses pins: the numbers its tables show.
SHOWN = ("mean_e2el_ms", "output_throughput")


def stop_rule(request: PlanRequest) -> StopRule | None:
    """The rule a study's runs stop by: the balanced length from the platform's priors (the
    runner refines them from what the study measures), or the ``--precision`` target; None
    at ``--precision 0`` (every run sends its num_prompts)."""
    if request.precision is None:
        return StopRule(balance=Balance.prior(platform_fact()))
    return StopRule(request.precision) if request.precision > 0 else None


def pinned_metrics(profiles: Sequence[WorkloadProfile], objectives: Sequence[Objective],
                   slos: Sequence[Slo], rule: StopRule | None,
                   sources: Mapping[str, RequestSource]) -> dict[str, Pinned]:
    """By profile whose runs may stop early (``precision.stops_early``), ``rule`` and the
    metrics it must pin: those of the objectives and SLOs on that profile that the requests
    can pin (core.trial.precision), else ``SHOWN``. Nothing without a rule: every run sends
    its num_prompts."""
    if rule is None:
        return {}
    out = {}
    for p in profiles:
        if not stops_early(p, sources[p.name]):
            continue
        used = [o.metric for o in objectives if o.profile == p.name]
        used += [s.metric for s in slos if s.profile == p.name]
        metrics = tuple(m for m in dict.fromkeys(used) if pinnable(m))
        out[p.name] = Pinned(rule, metrics or SHOWN)
    return out


def store_plan(study: optuna.Study, plan: StudyPlan) -> None:
    """Record the plan on a new study, or check that it matches the one stored."""
    new = plan.request
    old = read_plan(study)
    if old is not None:
        stored = {p.name: p.dataset for p in old.profiles if p.dataset is not None}
        for p in new.profiles:
            if p.dataset is not None and p.dataset.sha256 and p.name in stored:
                check_unchanged(stored[p.name], p.dataset.sha256)
        differ = old.differences(new)
        if differ:
            raise ConfigError(
                f"study {plan.study_name!r} was created with other settings ({', '.join(differ)} "
                "differ): join it with `autotune worker --study NAME`, which uses the stored "
                "plan, or pick another --study name"
            )
    write_plan(study, new)


def stored_request(study: optuna.Study, *, storage: str, workdir: Path, model: str | None,
                   trials: int | None) -> PlanRequest:
    """The request a study's stored plan makes, for a worker that joins it. ``model``
    overrides the stored model path (a node that keeps it elsewhere); ``trials`` the budget."""
    stored = read_plan(study)
    if stored is None or not stored.runnable:
        raise StudyError(f"study {study.study_name!r} has no stored plan: it was not created by "
                         "`autotune run`; start it with `autotune run --storage ... --study NAME`")
    return dataclasses.replace(stored, workdir=workdir, storage=storage, study_name=study.study_name,
                               model=model or stored.model,
                               trials=trials if trials is not None else stored.trials)


def set_budget(study: optuna.Study, trials: int) -> None:
    """The study-wide number of finished trials that workers run to (`worker --trials`)."""
    stored = read_plan(study)
    if stored is not None:
        write_plan(study, dataclasses.replace(stored, trials=trials))
