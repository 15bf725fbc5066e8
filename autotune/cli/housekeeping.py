"""`autotune delete-study`: a study and what it keeps under the workdir, after the user says
yes on a terminal (or passes --yes); without either, nothing is deleted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape

from autotune.cli.common import add_study_args, console, out, storage_of_args
from autotune.errors import ConfigError


def cmd_delete_study(args: argparse.Namespace, ask: Callable[[str], str] | None = None) -> int:
    """``ask``: how the user is asked (a question in, the answer out); default: on stdin's
    terminal, and where stdin is none, --yes is needed."""
    from autotune.study.store.storage import close_readers, load_existing, redact
    from autotune.study.store.study_files import delete_study, refuse_running, study_files

    storage = storage_of_args(args)
    files = study_files(load_existing(args.study, storage), Path(args.workdir))  # read only
    close_readers()
    refuse_running(files, force=args.force)  # before asking: nothing to say yes to
    if ask is None and sys.stdin.isatty():
        ask = lambda question: console.input(escape(question))  # noqa: E731
    if not args.yes and ask is None:
        raise ConfigError(f"delete-study --study {args.study!r}: no terminal to confirm on; "
                          "pass --yes to delete without asking (nothing deleted)")
    what = f"study {args.study!r} in {redact(storage)}: {files.text}"
    if not args.yes:
        answer = ask(f"delete {what}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            console.print("nothing deleted")
            return 1
    study = load_existing(args.study, storage, writable=True)
    delete_study(study, files, force=args.force)
    out.print(f"deleted {what}", soft_wrap=True, markup=False, highlight=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("delete-study", help="delete a study, its artifacts and its folders under "
                       "the workdir (asks first unless --yes)")
    add_study_args(p, missing="required")
    p.add_argument("--yes", action="store_true",
                   help="delete without asking (needed where no terminal can be asked)")
    p.add_argument("--force", action="store_true",
                   help="delete even while trials are still running (their worker died)")
    p.set_defaults(handler=cmd_delete_study)
