"""`autotune run | worker | confirm`: flags to a study request, progress lines while trials
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
    add_profile_args,
    add_profile_overrides,
    add_setting,
    add_study_args,
    asked_profiles,
    console,
    entrypoint_of,
    out,
    slots_of,
    storage_of_args,
)
from autotune.cli.results import print_closing, print_trials
from autotune.core.analysis.recommendation import TieSettings
from autotune.core.deployment.slots import Slot
from autotune.core.maths.durations import parse_duration
from autotune.core.plan.budget import TimeLeft
from autotune.core.plan.confirmation import CONFIRM_ROUNDS, trial_numbers
from autotune.core.plan.request_settings import DEFAULTS, REQUEST_SETTINGS, request_fields
from autotune.core.plan.study_request import StudyRequest
from autotune.errors import ConfigError
from autotune.study.output.progress import ProgressLines, opening_line
from autotune.study.run.confirm_rounds import check_rounds
from autotune.study.run.study_plan import StudyPlan


def _session(plan: StudyPlan, args: argparse.Namespace, slots: list[Slot]):
    """The plan on this node, as the flags say where and how it deploys (`confirm` has no
    worker flags: it runs no worker)."""
    from autotune.shell.server.worker_pool import worker_options
    from autotune.study.run.session import Node, StudySession
    from autotune.study.store.storage import Heartbeat

    beat = (args.heartbeat_interval, args.grace_period, args.max_retry) if hasattr(
        args, "max_retry") else None
    node = Node(tuple(slots), entrypoint_of(args), preimport=not args.no_preimport,
                heartbeat=Heartbeat(*beat) if beat else Heartbeat(),
                worker_options=tuple(worker_options(
                    plan.model.name, heartbeat=beat, entrypoint=args.entrypoint,
                    preimport=not args.no_preimport)) if beat else ())
    return StudySession.on_this_node(plan, node, say=console.print,
                                     dry_run=getattr(args, "dry_run", False))


def request_of(args: argparse.Namespace) -> StudyRequest:
    """`run`'s flags as the study's request: the settings' fields (``request_fields``), the
    profiles with their overrides, and where the references go."""
    return StudyRequest(
        workdir=Path(args.workdir), profiles=asked_profiles(args, args.profile or ["low-concurrency"]),
        references_path=args.references if args.seed_references else None,
        baseline_references=args.references, startup_timeout_s=args.startup_timeout,
        **request_fields(vars(args)))


def _finish(session, code: int) -> int:
    data = session.data()  # the numbers `trials` and `pareto` show: confirmations included
    plan = session.plan
    print_trials(data)
    print_closing(data, plan.study_name, TieSettings(plan.study_name, plan.request.smallest_difference))
    return code


def _confirmed(session, started: float | None = None, **asked) -> None:
    confirmed = session.confirm(**asked)
    ProgressLines(console.print, started=started).message(
        f"confirmed {len(confirmed)} trial(s): {', '.join(f'#{n}' for n in confirmed) or 'none'}")


def cmd_run(args: argparse.Namespace) -> int:
    from autotune.study.run.study_plan import build_plan
    from autotune.study.store.storage import hostname

    started = time.time()  # the budget counts from here: the model's generation and checks included
    plan = build_plan(request_of(args), say=console.print, dry_run=args.dry_run)
    slots = slots_of(args, plan.space.deployment.tensor_parallel_size, plan.platform)
    with _session(plan, args, slots) as session:
        plan = session.plan
        if plan.precision_text:
            console.print(plan.precision_text)
        if args.dry_run:
            for line in session.dry_run():
                out.print(line, soft_wrap=True, markup=False, highlight=False)
            return 0
        notes, created = session.create(started)
        console.print(opening_line(plan, slots))
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
    from autotune.study.run.study_plan import joined_plan
    from autotune.study.store.storage import hostname

    if args.trials is not None and args.trials < 1:
        raise ConfigError(f"--trials {args.trials}: must be >= 1")
    plan = joined_plan(args.study, storage_of_args(args), workdir=Path(args.workdir),
                       model=args.model, trials=args.trials)
    slots = slots_of(args, plan.space.deployment.tensor_parallel_size, plan.platform)
    with _session(plan, args, slots) as session:
        label = args.worker_label or hostname()
        console.print(opening_line(plan, slots, worker=label))
        code = session.work(label=label, progress=ProgressLines(console.print, label))
        return code if args.no_table else _finish(session, code)


def cmd_confirm(args: argparse.Namespace) -> int:
    from autotune.study.run.study_plan import joined_plan

    if args.k < 1:
        raise ConfigError(f"--finalists {args.k}: must be >= 1")
    check_rounds(args.rounds)  # before the study is read: bad input costs nothing
    budget = (parse_duration(args.time_budget, "--time-budget")
              if args.time_budget is not None else None)
    trials = trial_numbers(args.trials) if args.trials is not None else None
    plan = joined_plan(args.study, storage_of_args(args), workdir=Path(args.workdir),
                       model=args.model)
    slots = slots_of(args, plan.space.deployment.tensor_parallel_size, plan.platform)[:1]
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
    for setting in REQUEST_SETTINGS:
        add_setting(p, setting)
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
