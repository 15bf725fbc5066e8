"""What every command shares: the consoles, printing what ``study.output.terminal`` fits to
the terminal, option groups, and turning flags into the records the layers below take
(profiles, slots, storage URL, entry point)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import Slot, slots_for
from autotune.core.plan.request_settings import DEFAULTS, Setting
from autotune.core.workload.capacity_spec import LOADS
from autotune.core.workload.profiles import PROFILES, ProfileOverrides, WorkloadProfile, profiles_of
from autotune.shell.bench.files import read_profiles
from autotune.study.output.terminal import Line, Shown, fitted_tables
from autotune.study.store.storage import storage_url

console = Console(stderr=True, highlight=False, soft_wrap=True)  # progress and messages
out = Console(highlight=False, soft_wrap=True)  # results

DEFAULT_WORKDIR = "studies"


def show(view: Callable[[Console], Sequence[Shown]]) -> None:
    """Prints what ``view`` makes for this terminal (``study.output.terminal``): tables, whose
    titles too wrap at the terminal, and lines, never markup."""
    for item in view(out):
        if isinstance(item, Line):
            out.print(item.text, soft_wrap=not item.wrap, markup=False, highlight=False)
        else:
            out.print(item, soft_wrap=False)


def print_table(build: Callable[[int | None], Table], keep: int = 1) -> None:
    """The table ``build(width)`` makes, fitted to the terminal (``terminal.fitted_tables``)."""
    show(lambda console: fitted_tables(build, console, keep))


def add_setting(p: argparse.ArgumentParser, s: Setting) -> None:
    """A request setting's flag (``core.plan.request_settings``). Not given, a field's is None (the
    request takes the setting's default); one the CLI reads itself has its default."""
    options: dict = {"help": s.help.replace("%", "%%"), "default": None if s.field else s.default}
    if s.kind is bool:
        options["action"] = argparse.BooleanOptionalAction if s.negatable else "store_true"
    else:
        options |= {"type": s.kind, "metavar": s.metavar, "choices": s.choices,
                    "action": "append" if s.many else "store"}
    p.add_argument(s.flag, **options)


def storage_of_args(args: argparse.Namespace) -> str:
    """--storage, else $AUTOTUNE_STORAGE, else the workdir's SQLite file."""
    return storage_url(getattr(args, "storage", None),
                       f"sqlite:///{Path(args.workdir) / 'autotune.db'}")


def add_study_args(p: argparse.ArgumentParser, *, missing: str = "only") -> None:
    """--study and --storage. ``missing``: what no --study means: ``only``, the storage's one
    study (resolved by ``main`` before the command runs, ``storage.only_study``); ``all``, every study
    (the dashboard); ``required``, an error (a command that creates the study it names)."""
    default = {"only": " (default: the storage's only study)", "all": " (default: all of them)",
               "required": ""}[missing]
    p.add_argument("--study", required=missing == "required",
                   help=f"the study's name in the storage{default}; `autotune studies` lists them")
    p.add_argument("--storage", help="Optuna storage URL (default $AUTOTUNE_STORAGE, else "
                   "sqlite:///<workdir>/autotune.db)")
    p.set_defaults(study_from_storage=missing == "only")


def add_profile_overrides(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("profile overrides (shrink a run for a quick look)")
    g.add_argument("--num-prompts", type=int, help="measured requests per run")
    g.add_argument("--input-len", type=int, help="prompt tokens")
    g.add_argument("--output-len", type=int, help="output tokens")
    g.add_argument("--token-ids", action="store_true", default=None,
                   help="send random token ids instead of random text (profiles without a "
                        "dataset; as tables recorded that way)")


def add_profile_args(p: argparse.ArgumentParser, *, required: bool = False, default: str = "") -> None:
    p.add_argument("--profile", action="append", required=required,
                   help=f"workload profile, repeatable: {', '.join(PROFILES)} or one of "
                        f"--profile-file" + (f" (default {default})" if default else ""))
    p.add_argument("--profile-file", help="YAML of named profiles (lengths, range_ratio, "
                   "concurrency or rate, requests, warm-up, capacity search and its SLOs)")


def add_load_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("capacity profiles")
    g.add_argument("--load", choices=LOADS, help="the load a capacity profile searches: max "
                   "concurrency (default) or a Poisson request rate")
    g.add_argument("--load-range", metavar="LOW,HIGH",
                   help="loads searched (default 1,256 concurrent; 0.25,64 req/s with --load rate)")


def asked_profiles(args: argparse.Namespace, names: list[str]) -> tuple[WorkloadProfile, ...]:
    """The profiles ``names`` with the flags' overrides (``profiles_of``); --profile-file read."""
    defined = read_profiles(args.profile_file) if getattr(args, "profile_file", None) else None
    overrides = ProfileOverrides(
        num_prompts=args.num_prompts, input_len=args.input_len, output_len=args.output_len,
        max_concurrency=getattr(args, "max_concurrency", None),
        request_rate=getattr(args, "request_rate", None),
        burstiness=getattr(args, "burstiness", None),
        timeout_s=getattr(args, "time_limit", None), token_ids=getattr(args, "token_ids", None),
    )
    return profiles_of(names, overrides, defined, load=getattr(args, "load", None),
                       load_range=getattr(args, "load_range", None))


def add_deploy_args(p: argparse.ArgumentParser, *, startup_timeout: bool = True, study: bool = False) -> None:
    """The deployment flags; ``startup_timeout`` False where it is a study's (in its plan);
    ``study`` for the commands that deploy a study's trials one after another."""
    g = p.add_argument_group("deployment")
    g.add_argument("--gpus", help="GPU build: GPU ids, e.g. 0,1; `run` with more GPUs than one "
                   "deployment needs runs one trial per slot of --tp GPUs at once (0-7: 4 slots)")
    g.add_argument("--cores", help="CPU build: core ids, split into slots of --tp ranks x "
                   "--cores-per-rank cores, one trial per slot at once (default: one slot, all cores)")
    g.add_argument("--cores-per-rank", type=int, default=1, help="CPU build, with --cores (default 1)")
    g.add_argument("--kv-cache-gib", type=float, default=1.0,
                   help="CPU build only: VLLM_CPU_KVCACHE_SPACE (default 1)")
    if startup_timeout:
        g.add_argument("--startup-timeout", type=float, default=DEFAULTS.startup_timeout_s,
                       help=f"seconds (default {DEFAULTS.startup_timeout_s:g})")
    g.add_argument("--entrypoint", help="command that starts vLLM, e.g. 'vllm serve' "
                   "(default: vllm serve for the GPU build, the module entry point for the CPU build)")
    if study:
        g.add_argument("--no-preimport", action="store_true",
                       help="start every deployment as a new process that imports vLLM itself "
                            "(default: one process per run imports vLLM once and forks each "
                            "deployment from it; docs/startup.md)")


def entrypoint_of(args: argparse.Namespace):
    from autotune.shell.server.install import resolve_entrypoint

    return resolve_entrypoint(args.entrypoint.split() if args.entrypoint else None)


def slots_of(args: argparse.Namespace, tp: int, platform: str) -> list[Slot]:
    """The deployment slots the device flags ask for (``slots_for``), on the cores this
    process may use."""
    return slots_for(platform, tp, os.sched_getaffinity(0), gpus=getattr(args, "gpus", None),
                     cores=getattr(args, "cores", None), cores_per_rank=args.cores_per_rank,
                     kv_cache_gib=args.kv_cache_gib)
