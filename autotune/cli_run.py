"""`autotune run` and `autotune worker`: flags to a StudyPlan, progress lines while trials run,
a table at the end. `run` creates (or joins) a study and works on it with one worker per slot;
`worker` joins an existing study with the plan stored in it (another node, same storage)."""

from __future__ import annotations

import argparse
import math
import shlex
import time
from pathlib import Path

from optuna.trial import FrozenTrial, TrialState
from rich.markup import escape
from rich.table import Table

from autotune.cli import (
    DEFAULT_REFERENCES,
    DEFAULT_SPACE,
    GENERATED_MODEL,
    _add_deploy_args,
    _add_profile_overrides,
    _entrypoint,
    _fmt,
    _model_or_generate,
    _overrides,
    _package_file,
    _slots,
    console,
    out,
)
from autotune.core.objectives import KNOWN_METRICS, metric_names, parse_slo
from autotune.core.profiles import PROFILES, get_profile
from autotune.core.space import load_references, load_space
from autotune.errors import ConfigError


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a multi-objective study over real deployments")
    p.add_argument("--profile", action="append", choices=sorted(PROFILES),
                   help="workload profile (repeatable; default low-concurrency)")
    p.add_argument("--model", help="model folder or cached hub id "
                   "(default without GPU: a generated tiny MoE+MTP model)")
    p.add_argument("--space", default=DEFAULT_SPACE, help=f"search space (default {DEFAULT_SPACE})")
    p.add_argument("--references", default=DEFAULT_REFERENCES,
                   help=f"reference configs (default {DEFAULT_REFERENCES})")
    p.add_argument("--seed-references", action="store_true",
                   help="run the applicable reference configs first (enqueued once per study)")
    p.add_argument("--trials", type=int, default=10, help="study-wide budget of finished trials")
    p.add_argument("--study", help="study name (default: from model, space and profiles)")
    p.add_argument("--storage", help="Optuna storage URL: sqlite:///file.db (one machine) or "
                   "postgresql://user@host/db (several); default $AUTOTUNE_STORAGE, else "
                   "sqlite:///<workdir>/autotune.db")
    p.add_argument("--repeats", type=int, default=1, help="runs per profile per deployment")
    p.add_argument("--seed", type=int, help="sampler seed (reproducible studies)")
    p.add_argument("--slo", action="append", default=[],
                   help="constraint, e.g. 'high-concurrency:p99_ttft_ms<=5000' (repeatable)")
    p.add_argument("--max-model-len", type=int, help="override the space's deployment setting")
    p.add_argument("--tp", type=int, help="override the space's tensor parallel size")
    p.add_argument("--dry-run", action="store_true", help="print the argv of the trials, launch nothing")
    _add_profile_overrides(p)
    _add_deploy_args(p)
    _add_worker_args(p)

    p = sub.add_parser("worker", help="join an existing study (another node, same --storage) "
                       "and run its trials with the plan stored in it")
    p.add_argument("--study", required=True, help="study name, as `autotune run` created it")
    p.add_argument("--storage", help="storage URL (default $AUTOTUNE_STORAGE, else "
                   "sqlite:///<workdir>/autotune.db); postgresql://... for several nodes")
    p.add_argument("--model", help="this node's path of the model (default: the study's)")
    p.add_argument("--trials", type=int, help="set the study-wide budget of finished trials")
    p.add_argument("--worker-label", help="name in logs; also varies the sampler seed per worker "
                   "(default: host name)")
    p.add_argument("--no-table", action="store_true", help=argparse.SUPPRESS)  # a slot of a pool
    _add_deploy_args(p)
    _add_worker_args(p)


def _add_worker_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workers (a dead worker's trial is failed and retried by a live one)")
    g.add_argument("--heartbeat-interval", type=int, default=30, help="seconds (default 30)")
    g.add_argument("--grace-period", type=int, default=120,
                   help="seconds without heartbeat before a trial counts as dead (default 120)")
    g.add_argument("--max-retry", type=int, default=2, help="retries of a dead worker's trial (default 2)")


def _heartbeat(args: argparse.Namespace):
    from autotune.study.storage import Heartbeat

    return Heartbeat(args.heartbeat_interval, args.grace_period, args.max_retry)


class ConsoleProgress:
    """Prints trial i of N, the phase and the elapsed time, one line per change; ``label``
    names the worker when several print to one terminal."""

    def __init__(self, label: str = "") -> None:
        self.t0 = time.monotonic()
        self.label = escape(f" [{label}]") if label else ""

    def _stamp(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"[{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}]{self.label}"

    def phase(self, number: int, total: int, phase: str) -> None:
        console.print(f"{self._stamp()} trial {number}/{total}: {phase}")

    def trial_done(self, number: int, total: int, trial: FrozenTrial, front: list[int]) -> None:
        console.print(f"{self._stamp()} trial {number}/{total} (#{trial.number}): "
                      f"{describe_result(trial)}")
        console.print(f"{self._stamp()} Pareto front so far: "
                      f"{', '.join(f'#{n}' for n in front) or 'no feasible trial yet'}")

    def message(self, text: str) -> None:
        console.print(f"{self._stamp()} {text}")


def describe_result(trial: FrozenTrial) -> str:
    attrs = trial.user_attrs
    if trial.state != TrialState.COMPLETE:
        return f"{trial.state.name.lower()}: {attrs.get('failure_message', '')}"
    if attrs.get("failure_class"):
        dup = f" (same flags as #{attrs['duplicate_of']}, not relaunched)" if "duplicate_of" in attrs else ""
        return f"infeasible, {attrs['failure_class']}: {attrs.get('failure_message', '')[:200]}{dup}"
    parts = [f"{p}: {_fmt(m['output_throughput'])} tok/s, {_fmt(m['mean_e2el_ms'], 0)} ms"
             for p, m in attrs.get("metrics", {}).items()]
    return f"ready in {attrs.get('startup_s', 0):.0f} s; " + "; ".join(parts)


def _study_name(model: str, space: str, profiles: list[str]) -> str:
    base = Path(model.rstrip("/")).name or model.replace("/", "-")
    return f"{base}-{space}-{'+'.join(profiles)}"


def build_plan(args: argparse.Namespace):
    """The plan and the slots `run` asks for."""
    from autotune.shell.server import detect_platform
    from autotune.study.plans import StudyPlan
    from autotune.study.storage import storage_url
    from autotune.study.trial import BenchPlan, TrialSetup

    workdir = Path(args.workdir)
    profiles = args.profile or ["low-concurrency"]
    if len(set(profiles)) != len(profiles):
        raise ConfigError(f"--profile: each profile once, got {profiles}")
    if args.trials < 1 or args.repeats < 1:
        raise ConfigError("--trials and --repeats must be >= 1")
    space = load_space(_package_file(args.space))
    references = None
    if args.seed_references:
        references = load_references(_package_file(args.references), space)
    slos = tuple(parse_slo(text, profiles, KNOWN_METRICS) for text in args.slo)
    platform = detect_platform()
    tp = args.tp or space.deployment.tensor_parallel_size
    slots = _slots(args, tp, platform)
    if args.dry_run and not args.model:
        model = None
    else:
        model = _model_or_generate(args.model, workdir, platform)
    if model is None:  # dry run without a model: describe the generated one without writing it
        from autotune.core.model_info import ModelInfo

        model = ModelInfo(str(workdir / GENERATED_MODEL), "Glm4MoeForCausalLM", True, 4, 1,
                          32768, 4, 2, 512, {"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.5})
    if args.tp:
        import dataclasses

        space = dataclasses.replace(space, deployment=dataclasses.replace(
            space.deployment, tensor_parallel_size=tp))
    max_len = args.max_model_len or space.deployment.max_model_len or model.native_context
    overrides = _overrides(args)
    bench = BenchPlan(
        profiles=tuple(get_profile(p, overrides) for p in profiles),
        vocab_size=model.vocab_size, repeats=args.repeats, seed=args.seed or 0,
    )
    storage = storage_url(args.storage, f"sqlite:///{workdir / 'autotune.db'}")
    name = args.study or _study_name(model.name, space.name, profiles)
    setup = TrialSetup(model=model.name, workdir=workdir, slot=slots[0],
                       entrypoint=_entrypoint(args), startup_timeout_s=args.startup_timeout)
    plan = StudyPlan(
        model=model, space=space, bench=bench, trials=args.trials, study_name=name,
        storage=storage, workdir=workdir, max_model_len=max_len, references=references,
        seed_references=args.seed_references, seed=args.seed, slos=slos, setup_defaults=setup,
    )
    return plan, slots


def _worker_options(args: argparse.Namespace, model: str) -> list[str]:
    """Flags a slot's worker process gets from `run` or a multi-slot `worker`."""
    options = ["--model", model, "--startup-timeout", f"{args.startup_timeout:g}",
               "--heartbeat-interval", str(args.heartbeat_interval),
               "--grace-period", str(args.grace_period), "--max-retry", str(args.max_retry)]
    if args.entrypoint:
        options += ["--entrypoint", args.entrypoint]
    return [*options, "--no-table"]  # the storage URL goes by $AUTOTUNE_STORAGE, never argv


def _work(plan, slots, args: argparse.Namespace, label: str) -> int:
    """Run the study's trials: in this process for one slot, one worker process per slot
    otherwise. Returns the exit code."""
    from autotune.shell.validation import VllmValidator, vllm_importable
    from autotune.study.pool import run_workers
    from autotune.study.runner import StudyRunner

    if len(slots) > 1:
        return run_workers(plan.workdir, plan.study_name, plan.storage, slots, label,
                           _worker_options(args, plan.model.name), console.print)
    runner = StudyRunner(plan, progress=ConsoleProgress(label), heartbeat=_heartbeat(args),
                         validator=VllmValidator() if vllm_importable() else None, label=label)
    runner.work()
    return 0


def _finish(plan, code: int) -> int:
    from autotune.study.results import load_existing

    study = load_existing(plan.study_name, plan.storage)
    out.print(trials_table(study.trials, plan.profile_names))
    return code


def cmd_run(args: argparse.Namespace) -> int:
    from autotune.study.runner import dry_run_argv, prepare_study
    from autotune.study.storage import hostname, redact

    plan, slots = build_plan(args)
    if args.dry_run:
        refs = len(plan.references.configs) if plan.references else 0
        for label, argv in dry_run_argv(plan, max(plan.trials, min(refs, plan.trials))):
            out.print(f"{label}: {shlex.join(['vllm', 'serve', plan.model.name, *argv])}",
                      soft_wrap=True, markup=False)
        out.print("dry run: nothing launched, nothing written")
        return 0
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    study, notes, created = prepare_study(plan, _heartbeat(args))
    console.print(f"study {plan.study_name!r} in {redact(plan.storage)}: model {plan.model.name}, "
                  f"space {plan.space.path}, profiles {', '.join(plan.profile_names)}, "
                  f"budget {plan.trials} trials, {len(slots)} slot(s): "
                  f"{'; '.join(s.describe() for s in slots)}")
    for note in notes:
        console.print(note)
    # The `run` that created the study samples with --seed itself; one that joins varies it.
    return _finish(plan, _work(plan, slots, args, "" if created else hostname()))


def cmd_worker(args: argparse.Namespace) -> int:
    import optuna

    from autotune.shell.server import detect_platform
    from autotune.study.plans import PLAN_ATTR, load_plan
    from autotune.study.storage import hostname, open_storage, redact, storage_url
    from autotune.study.trial import TrialSetup

    workdir = Path(args.workdir)
    storage = storage_url(args.storage, f"sqlite:///{workdir / 'autotune.db'}")
    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials {args.trials}: must be >= 1")
    try:
        study = optuna.load_study(study_name=args.study, storage=open_storage(storage, _heartbeat(args)))
    except KeyError:
        raise ConfigError(f"--study {args.study!r}: no such study in {redact(storage)}; create it "
                          "with `autotune run --storage ... --study NAME`") from None
    tp = study.user_attrs.get(PLAN_ATTR, {}).get("tensor_parallel_size", 1)
    slots = _slots(args, tp, detect_platform())
    setup = TrialSetup(model="", workdir=workdir, slot=slots[0], entrypoint=_entrypoint(args),
                       startup_timeout_s=args.startup_timeout)
    plan = load_plan(study, storage, model=args.model, workdir=workdir, trials=args.trials,
                     setup=setup)
    label = args.worker_label or hostname()
    console.print(f"worker {label} joins study {plan.study_name!r} in {redact(storage)}: budget "
                  f"{plan.trials} trials, {len(slots)} slot(s): {'; '.join(s.describe() for s in slots)}")
    workdir.mkdir(parents=True, exist_ok=True)
    code = _work(plan, slots, args, label)
    return code if args.no_table else _finish(plan, code)


def trials_table(trials: list[FrozenTrial], profiles: list[str]) -> Table:
    from autotune.study.records import feasible

    table = Table(title="trials")
    table.add_column("#", justify="right")
    table.add_column("reference")
    table.add_column("result")
    for name in metric_names(profiles):
        table.add_column(name, justify="right")
    retried_as = {n: t.number for t in trials for n in t.system_attrs.get("retry_history", [])}
    for t in trials:
        if t.state not in (TrialState.COMPLETE, TrialState.FAIL) or t.user_attrs.get("skipped"):
            continue  # skipped: a duplicate or over-budget claim, given back before deploying
        ok = feasible(t)
        result = "ok" if ok else t.user_attrs.get("failure_class") or (
            "slo violated" if t.user_attrs.get("slo_violated") else
            f"worker lost, retried as #{retried_as[t.number]}" if t.number in retried_as else
            t.state.name.lower())
        values = [_fmt(v, 1) if ok else "-" for v in (t.values or [math.nan] * 2 * len(profiles))]
        table.add_row(str(t.number), t.user_attrs.get("reference", ""), result, *values)
    return table
