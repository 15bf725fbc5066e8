"""The command line: parses flags, calls the layers below, prints, and owns exit codes.

Each command family registers its subcommands (``register``) with a handler; ``main`` parses
and dispatches in one place. Exit codes: 0 success; 1 a deployment, benchmark or study failed;
2 bad input (flag, file, field), reported in one line before anything runs; 130 interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from autotune.cli import deploy, housekeeping, results, study
from autotune.cli.common import DEFAULT_WORKDIR, console, storage_of_args
from autotune.errors import AutotuneError, ConfigError
from autotune.study.store.storage import close_readers, only_study

FAMILIES = (deploy, study, results, housekeeping)


class Parser(argparse.ArgumentParser):
    """argparse's own errors (an unknown flag, a bad choice or value, a missing one) as every
    bad input: one line naming the flag and where help is, exit 2, instead of the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"autotune: error: {message}; try {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="autotune", description="Find the best vLLM deployment for a workload.")
    parser.add_argument("--workdir", default=DEFAULT_WORKDIR,
                        help="home of study storage, artifacts and generated models (default studies)")
    sub = parser.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.register(sub)
    return parser


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C must reach a running trial even when autotune was started with SIGINT ignored
    # (as background jobs are); SIGTERM is handled alike. The trial tears its server down.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        passes = getattr(args, "passes_vllm_flags", False)
        if extra and not passes:
            Parser(prog=f"{parser.prog} {args.command}").error(
                f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help (0) or a bad flag (2), said by the parser
        return exc.code if isinstance(exc.code, int) else 2
    try:
        if getattr(args, "study_from_storage", False) and args.study is None:
            args.study = only_study(storage_of_args(args))
        return args.handler(args, extra) if passes else args.handler(args)
    except ConfigError as exc:
        print(f"autotune: error: {exc}", file=sys.stderr)  # one line, never wrapped or styled
        return 2
    except AutotuneError as exc:
        console.print(f"autotune: {type(exc).__name__}: {exc}")
        log_tail = getattr(exc, "log_tail", "")
        if log_tail:
            console.print("--- server log tail ---\n" + "\n".join(log_tail.splitlines()[-15:]))
        return 1
    except KeyboardInterrupt:
        console.print("autotune: interrupted")
        return 130
    finally:
        close_readers()  # reading commands leave no file of SQLite's behind
