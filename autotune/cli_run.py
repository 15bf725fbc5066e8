"""`autotune run`: flags to a StudyPlan, progress lines while trials run, a table at the end."""

from __future__ import annotations

import argparse
import math
import shlex
import time
from pathlib import Path

from optuna.trial import FrozenTrial, TrialState
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
    _slot,
    console,
    out,
)
from autotune.core.objectives import metric_names, parse_slo
from autotune.core.profiles import PROFILES, get_profile
from autotune.core.space import load_references, load_space
from autotune.errors import ConfigError

KNOWN_METRICS = (
    "output_throughput", "request_throughput", "total_token_throughput",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
      for s in ("mean", "median", "std", "p50", "p90", "p99")),
)


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
    p.add_argument("--storage", help="Optuna storage URL (default sqlite:///<workdir>/autotune.db)")
    p.add_argument("--repeats", type=int, default=1, help="runs per profile per deployment")
    p.add_argument("--seed", type=int, help="sampler seed (reproducible studies)")
    p.add_argument("--slo", action="append", default=[],
                   help="constraint, e.g. 'high-concurrency:p99_ttft_ms<=5000' (repeatable)")
    p.add_argument("--max-model-len", type=int, help="override the space's deployment setting")
    p.add_argument("--tp", type=int, help="override the space's tensor parallel size")
    p.add_argument("--dry-run", action="store_true", help="print the argv of the trials, launch nothing")
    _add_profile_overrides(p)
    _add_deploy_args(p)


class ConsoleProgress:
    """Prints trial i of N, the phase and the elapsed time, one line per change."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def _stamp(self) -> str:
        s = int(time.monotonic() - self.t0)
        return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"

    def phase(self, number: int, total: int, phase: str) -> None:
        console.print(f"[{self._stamp()}] trial {number}/{total}: {phase}")

    def trial_done(self, number: int, total: int, trial: FrozenTrial, front: list[int]) -> None:
        console.print(f"[{self._stamp()}] trial {number}/{total} (#{trial.number}): "
                      f"{describe_result(trial)}")
        console.print(f"[{self._stamp()}] Pareto front so far: "
                      f"{', '.join(f'#{n}' for n in front) or 'no feasible trial yet'}")

    def message(self, text: str) -> None:
        console.print(f"[{self._stamp()}] {text}")


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
    from autotune.shell.server import detect_platform
    from autotune.study.runner import StudyPlan
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
    if args.dry_run and not args.model:
        model = None
    else:
        model = _model_or_generate(args.model, workdir, platform)
    if model is None:  # dry run without a model: describe the generated one without writing it
        from autotune.core.model_info import ModelInfo

        model = ModelInfo(str(workdir / GENERATED_MODEL), "Glm4MoeForCausalLM", True, 4, 1,
                          32768, 4, 2, 512, {"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": 0.5})
    tp = args.tp or space.deployment.tensor_parallel_size
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
    storage = args.storage or f"sqlite:///{workdir / 'autotune.db'}"
    name = args.study or _study_name(model.name, space.name, profiles)
    setup = TrialSetup(model=model.name, workdir=workdir, slot=_slot(args, tp, platform),
                       entrypoint=_entrypoint(args), startup_timeout_s=args.startup_timeout)
    return StudyPlan(
        model=model, space=space, bench=bench, trials=args.trials, study_name=name,
        storage=storage, workdir=workdir, max_model_len=max_len, references=references,
        seed_references=args.seed_references, seed=args.seed, slos=slos, setup_defaults=setup,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from autotune.study.runner import dry_run_argv

    plan = build_plan(args)
    if args.dry_run:
        refs = len(plan.references.configs) if plan.references else 0
        for label, argv in dry_run_argv(plan, max(plan.trials, min(refs, plan.trials))):
            out.print(f"{label}: {shlex.join(['vllm', 'serve', plan.model.name, *argv])}",
                      soft_wrap=True, markup=False)
        out.print("dry run: nothing launched, nothing written")
        return 0
    from autotune.shell.validation import VllmValidator, vllm_importable
    from autotune.study.runner import StudyRunner

    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    console.print(f"study {plan.study_name!r} in {plan.storage}: model {plan.model.name}, "
                  f"space {plan.space.path}, profiles {', '.join(plan.profile_names)}, "
                  f"budget {plan.trials} trials")
    runner = StudyRunner(plan, progress=ConsoleProgress(),
                         validator=VllmValidator() if vllm_importable() else None)
    study = runner.run()
    out.print(trials_table(study.trials, plan.profile_names))
    return 0


def trials_table(trials: list[FrozenTrial], profiles: list[str]) -> Table:
    from autotune.study.records import feasible

    table = Table(title="trials")
    table.add_column("#", justify="right")
    table.add_column("reference")
    table.add_column("result")
    for name in metric_names(profiles):
        table.add_column(name, justify="right")
    for t in trials:
        if t.state not in (TrialState.COMPLETE, TrialState.FAIL):
            continue
        ok = feasible(t)
        result = "ok" if ok else t.user_attrs.get("failure_class") or (
            "slo violated" if t.user_attrs.get("slo_violated") else t.state.name.lower())
        values = [_fmt(v, 1) if ok else "-" for v in (t.values or [math.nan] * 2 * len(profiles))]
        table.add_row(str(t.number), t.user_attrs.get("reference", ""), result, *values)
    return table
