"""`autotune run | worker | confirm`: flags to a plan request, progress lines while trials
run, the trial table at the end. `run` creates (or joins) a study and works on it with one
worker per slot, then confirms its finalists; `worker` joins an existing study with the plan
stored in it (another node, same storage); `confirm` redeploys a study's finalists."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from autotune.cli.common import (
    add_deploy_args,
    add_load_args,
    add_precision,
    add_profile_args,
    add_profile_overrides,
    add_smallest_difference,
    add_study_args,
    asked_profiles,
    console,
    entrypoint_of,
    out,
    slots_of,
    storage_of_args,
)
from autotune.cli.results import print_trials
from autotune.core.analysis.recommendation import TieSettings, parse_smallest_difference
from autotune.core.deployment.baseline import VLLM_DEFAULTS
from autotune.core.deployment.slots import Slot
from autotune.core.maths.durations import parse_duration
from autotune.core.plan.budget import TimeLeft
from autotune.core.plan.confirmation import trial_numbers
from autotune.core.plan.estimate import UNBOUNDED_TRIALS
from autotune.core.plan.request import DEFAULT_SPACE, PlanRequest
from autotune.core.space.exploration import EXPLORATIONS
from autotune.core.trial.precision import parse_precision
from autotune.errors import ConfigError
from autotune.study.output.progress import ProgressLines, study_budget_text
from autotune.study.run.confirm_rounds import CONFIRM_ROUNDS, check_rounds
from autotune.study.run.samplers import SAMPLERS
from autotune.study.run.study_plan import DEFAULT_REFERENCES, StudyPlan

DEFAULTS = PlanRequest(profiles=())  # the one source of run's defaults


def _session(plan: StudyPlan, args: argparse.Namespace, slots: list[Slot]):
    """The plan on this node, as the flags say where and how it deploys (`confirm` has no
    worker flags: it runs no worker)."""
    from autotune.study.run.session import Node, StudySession
    from autotune.study.store.storage import Heartbeat

    workers = hasattr(args, "max_retry")
    node = Node(tuple(slots), entrypoint_of(args), preimport=not args.no_preimport,
                heartbeat=Heartbeat(args.heartbeat_interval, args.grace_period, args.max_retry)
                if workers else Heartbeat(),
                worker_options=tuple(_worker_options(args, plan.model.name)) if workers else ())
    return StudySession.on_this_node(plan, node, say=console.print,
                                     dry_run=getattr(args, "dry_run", False))


def request_of(args: argparse.Namespace) -> PlanRequest:
    names = args.profile or ["low-concurrency"]
    budget = parse_duration(args.time_budget, "--time-budget") if args.time_budget else None
    trials = args.trials if args.trials is not None else (
        UNBOUNDED_TRIALS if budget is not None else DEFAULTS.trials)
    return PlanRequest(
        workdir=Path(args.workdir), profiles=asked_profiles(args, names), model=args.model,
        space_path=args.space, references_path=args.references if args.seed_references else None,
        trials=trials, repeats=args.repeats, race=args.race, time_budget_s=budget,
        seed=args.seed, sampler=args.sampler, study_name=args.study,
        storage=args.storage, objectives=tuple(args.objective), slos=tuple(args.slo),
        tp=args.tp, max_model_len=args.max_model_len, confirm=args.confirm,
        smallest_difference=parse_smallest_difference(args.smallest_difference),
        precision=parse_precision(args.precision),
        startup_timeout_s=args.startup_timeout, cap_cuda_graphs=args.cap_cuda_graphs,
        baseline=args.baseline, baseline_references=args.references, calibrate=args.calibrate,
        exploration=args.exploration,
    )


def _worker_options(args: argparse.Namespace, model: str) -> list[str]:
    """Flags a slot's worker process gets from `run` or a multi-slot `worker`."""
    options = ["--model", model, "--heartbeat-interval", str(args.heartbeat_interval),
               "--grace-period", str(args.grace_period), "--max-retry", str(args.max_retry)]
    if args.entrypoint:
        options += ["--entrypoint", args.entrypoint]
    if args.no_preimport:
        options.append("--no-preimport")
    return [*options, "--no-table"]  # the storage URL goes by $AUTOTUNE_STORAGE, never argv


def _finish(session, code: int) -> int:
    from autotune.cli.results import print_front_and_recommendations

    data = session.data()  # the numbers `trials` and `pareto` show: confirmations included
    plan = session.plan
    print_trials(data)
    print_front_and_recommendations(data, plan.study_name,
                                    TieSettings(plan.study_name, plan.request.smallest_difference))
    return code


def _confirmed(session, started: float | None = None, **asked) -> None:
    confirmed = session.confirm(**asked)
    ProgressLines(console.print, started=started).message(
        f"confirmed {len(confirmed)} trial(s): {', '.join(f'#{n}' for n in confirmed) or 'none'}")


def cmd_run(args: argparse.Namespace) -> int:
    from autotune.shell.server.install import detect_platform
    from autotune.study.run.study_plan import build_plan
    from autotune.study.store.storage import hostname, redact

    started = time.time()  # the budget counts from here: the model's generation and checks included
    plan = build_plan(request_of(args), say=console.print, dry_run=args.dry_run)
    slots = slots_of(args, plan.space.deployment.tensor_parallel_size, detect_platform())
    with _session(plan, args, slots) as session:
        plan = session.plan
        if plan.precision_text:
            console.print(plan.precision_text)
        if args.dry_run:
            for line in session.dry_run():
                out.print(line, soft_wrap=True, markup=False, highlight=False)
            return 0
        notes, created = session.create(started)
        console.print(f"study {plan.study_name!r} in {redact(plan.storage)}: model {plan.model.name}, "
                      f"space {plan.space.path}, profiles {', '.join(plan.profile_names)}, objectives "
                      f"{', '.join(o.name for o in plan.objectives)}, budget {study_budget_text(plan)}, "
                      f"{len(slots)} slot(s): {'; '.join(s.devices_text() for s in slots)}")
        if created:
            console.print(plan.exploration_text, soft_wrap=True, markup=False)
        for note in notes:
            console.print(note)
        # The `run` that created the study samples with --seed itself; one that joins varies it.
        label = "" if created else hostname()
        code = session.work(label=label, progress=ProgressLines(console.print, label, started))
        if code == 0 and plan.confirm:
            _confirmed(session, started, k=plan.confirm, study_budget=True)
        if plan.time_budget_s is not None:
            console.print(TimeLeft(time.time() - started, plan.time_budget_s, None, 0.0).kept_text)
        return _finish(session, code)


def cmd_worker(args: argparse.Namespace) -> int:
    from autotune.shell.server.install import detect_platform
    from autotune.study.run.study_plan import build_plan, set_budget, stored_request
    from autotune.study.store.storage import hostname, load_existing, redact

    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials {args.trials}: must be >= 1")
    workdir, storage = Path(args.workdir), storage_of_args(args)
    study = load_existing(args.study, storage, writable=True)
    request = stored_request(study, storage=storage, workdir=workdir, model=args.model,
                             trials=args.trials)
    plan = build_plan(request)
    if args.trials is not None:
        set_budget(study, args.trials)
    slots = slots_of(args, plan.space.deployment.tensor_parallel_size, detect_platform())
    with _session(plan, args, slots) as session:
        label = args.worker_label or hostname()
        console.print(f"worker {label} joins study {plan.study_name!r} in {redact(storage)}: budget "
                      f"{study_budget_text(plan)}, {len(slots)} slot(s): {'; '.join(s.devices_text() for s in slots)}")
        code = session.work(label=label, progress=ProgressLines(console.print, label))
        return code if args.no_table else _finish(session, code)


def cmd_confirm(args: argparse.Namespace) -> int:
    from autotune.shell.server.install import detect_platform
    from autotune.study.run.study_plan import build_plan, stored_request
    from autotune.study.store.storage import load_existing

    if args.k < 1:
        raise ConfigError(f"--finalists {args.k}: must be >= 1")
    check_rounds(args.rounds)  # before the study is read: bad input costs nothing
    budget = (parse_duration(args.time_budget, "--time-budget")
              if args.time_budget is not None else None)
    trials = trial_numbers(args.trials) if args.trials is not None else None
    storage = storage_of_args(args)
    study = load_existing(args.study, storage, writable=True)
    plan = build_plan(stored_request(study, storage=storage, workdir=Path(args.workdir),
                                     model=args.model, trials=None))
    slots = slots_of(args, plan.space.deployment.tensor_parallel_size, detect_platform())[:1]
    with _session(plan, args, slots) as session:
        _confirmed(session, k=args.k, trials=trials, rounds=args.rounds, budget_s=budget)
        return _finish(session, 0)


def _add_worker_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workers (a dead worker's trial is failed and retried by a live one)")
    g.add_argument("--heartbeat-interval", type=int, default=30, help="seconds (default 30)")
    g.add_argument("--grace-period", type=int, default=120,
                   help="seconds without heartbeat before a trial counts as dead (default 120)")
    g.add_argument("--max-retry", type=int, default=2, help="retries of a dead worker's trial (default 2)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a multi-objective study over real deployments")
    add_profile_args(p, default="low-concurrency")
    p.add_argument("--model", help="model folder or cached hub id "
                   "(default without GPU: a generated tiny MoE+MTP model)")
    p.add_argument("--space", default=DEFAULT_SPACE, help=f"search space (default {DEFAULT_SPACE})")
    p.add_argument("--references", default=DEFAULT_REFERENCES,
                   help=f"reference configs (default {DEFAULT_REFERENCES})")
    p.add_argument("--seed-references", action="store_true",
                   help="run the applicable reference configs after the baseline (enqueued once "
                        "per study)")
    p.add_argument("--baseline", default=VLLM_DEFAULTS, metavar="WHAT",
                   help="what you run today, measured first and compared with every pick: "
                        f"{VLLM_DEFAULTS} (default: no tuned flag, the model's native context); "
                        "your own command ('vllm serve MODEL --max-num-seqs 128 ...') or flags "
                        "('--max-num-seqs 128'), read by vLLM's parser: the flags the space tunes "
                        "set the baseline's values, every other one is kept on every trial and "
                        "export; a vllm serve --config YAML, a file `autotune export` wrote; or a "
                        "reference name of --references (docs/studies.md)")
    p.add_argument("--exploration", choices=EXPLORATIONS, default=EXPLORATIONS[0],
                   help="after the baseline, measure first: order (default) the single changes "
                        "the reference study's effects expect to help most, then the sampler; "
                        "sampler: the sampler from the start (chosen by replay, docs/answers.md)")
    p.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=False,
                   help="deploy the baseline a second time right after it is served, to measure "
                        "the spread between deployments from the start (default off: the spread "
                        "is inherited from this storage's studies of the same model, machine and "
                        "vLLM, else assumed, and learned from confirmations; docs/noise.md)")
    p.add_argument("--trials", type=int,
                   help=f"study-wide budget of finished trials (default {DEFAULTS.trials}; with "
                        "--time-budget alone, the time decides)")
    p.add_argument("--time-budget", metavar="DURATION",
                   help="wall clock for the study, confirmation included, e.g. 20m or 2h: no "
                        "deployment starts whose expected end (at the measured cost of a "
                        "deployment) passes it; a redeployment of each finalist whose verdict is "
                        "in question is kept in reserve, and the confirmation is shrunk or skipped "
                        "where it no longer fits")
    p.add_argument("--race", action="store_true",
                   help="stop measuring a trial once the front beats it beyond the noise (off by "
                        "default: docs/samplers.md says when it pays)")
    p.add_argument("--cap-cuda-graphs", action="store_true",
                   help="capture CUDA graphs only up to the study's highest concurrency x (1 + "
                        "speculative tokens), alike for every trial, the baseline and the export "
                        "(off by default: docs/startup.md)")
    p.add_argument("--study", help="study name (default: from model, space and profiles)")
    p.add_argument("--storage", help="Optuna storage URL: sqlite:///file.db (one machine) or "
                   "postgresql://user@host/db (several); default $AUTOTUNE_STORAGE, else "
                   "sqlite:///<workdir>/autotune.db")
    p.add_argument("--repeats", type=int, default=DEFAULTS.repeats,
                   help=f"runs per profile per deployment (default {DEFAULTS.repeats}: a trial's "
                        "interval comes from the spread between deployments, docs/noise.md)")
    p.add_argument("--seed", type=int, help="sampler seed (reproducible studies)")
    p.add_argument("--sampler", choices=SAMPLERS, default=DEFAULTS.sampler,
                   help="tpe (default; chosen by replaying samplers against a recorded table, "
                        "see docs/samplers.md), random, nsga2 or gp")
    p.add_argument("--objective", action="append", default=[],
                   help="PROFILE:METRIC[:min|max] (repeatable; default: mean E2EL at the lowest "
                        "concurrency against output throughput at the highest)")
    p.add_argument("--slo", action="append", default=[],
                   help="repeatable: a constraint on a profile, e.g. 'high-concurrency:"
                        "p99_ttft_ms<=5000', or the limits a capacity profile searches under, "
                        "e.g. 'p99_ttft_ms<=2000' (no profile: the capacity profile's)")
    add_smallest_difference(p)
    add_precision(p)
    p.add_argument("--confirm", type=int, default=DEFAULTS.confirm, metavar="K",
                   help=f"at the end, redeploy up to K front members and the baseline, up to "
                        f"{CONFIRM_ROUNDS} interleaved rounds (default {DEFAULTS.confirm}; 0: off)")
    p.add_argument("--max-model-len", type=int, help="override the space's deployment setting")
    p.add_argument("--tp", type=int, help="override the space's tensor parallel size")
    p.add_argument("--dry-run", action="store_true", help="print the argv of the trials, launch nothing")
    add_profile_overrides(p)
    add_load_args(p)
    add_deploy_args(p, study=True)
    _add_worker_args(p)
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("worker", help="join an existing study (another node, same --storage) "
                       "and run its trials with the plan stored in it")
    add_study_args(p)
    p.add_argument("--model", help="this node's path of the model (default: the study's)")
    p.add_argument("--trials", type=int, help="set the study-wide budget of finished trials")
    p.add_argument("--worker-label", help="name in logs; also varies the sampler seed per worker "
                   "(default: host name)")
    p.add_argument("--no-table", action="store_true", help=argparse.SUPPRESS)  # a slot of a pool
    add_deploy_args(p, startup_timeout=False, study=True)  # the study's, from its plan
    _add_worker_args(p)
    p.set_defaults(handler=cmd_worker)

    p = sub.add_parser("confirm", help="redeploy a study's front and baseline in interleaved "
                       "rounds; recommend, export and report then use the confirmed numbers")
    add_study_args(p)
    p.add_argument("--finalists", dest="k", type=int, default=DEFAULTS.confirm, metavar="K",
                   help=f"front members to confirm, with the baseline (default {DEFAULTS.confirm})")
    p.add_argument("--trials", metavar="A,B", help="confirm these trials instead of the finalists "
                   "(as a tie's cost names them)")
    p.add_argument("--rounds", type=int, default=CONFIRM_ROUNDS,
                   help=f"at most this many interleaved rounds, added to those already stored; "
                        f"after the first, a round redeploys only trials still tied (default "
                        f"{CONFIRM_ROUNDS}); an unfinished confirmation stored in the study is "
                        "continued instead")
    p.add_argument("--time-budget", metavar="DURATION",
                   help="wall time the confirmation may take (e.g. 30m): it is shrunk to fit at "
                        "the study's measured cost of a deployment, and no deployment starts "
                        "that would end past it")
    p.add_argument("--model", help="this node's path of the model (default: the study's)")
    add_deploy_args(p, startup_timeout=False, study=True)  # the study's, from its plan
    p.set_defaults(handler=cmd_confirm)
