"""`autotune pareto | recommend | export | report | import-results | dashboard`: reading a
study. All but import-results only read: they never create a file, folder or database."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from autotune.cli.common import add_setting, add_study_args, console, out, show, storage_of_args
from autotune.core.analysis.recommendation import (
    USES,
    TieSettings,
    default_uses,
    parse_smallest_difference,
    recommend_each,
)
from autotune.core.analysis.study_data import StudyData
from autotune.core.plan.request_settings import SETTINGS_BY_FLAG
from autotune.core.plan.study_request import DEFAULT_REFERENCES, DEFAULT_SPACE
from autotune.errors import ConfigError
from autotune.shell.bench.files import locate_shipped, read_model_info, read_space
from autotune.study.output.documents import OUTPUT_FORMATS, study_document
from autotune.study.output.tables import relaunch_table
from autotune.study.output.terminal import (
    closing_view,
    front_view,
    recommendations_view,
    studies_view,
    trials_view,
)


def _data(args: argparse.Namespace):
    from autotune.study.store.records import study_data
    from autotune.study.store.storage import load_existing

    return study_data(load_existing(args.study, storage_of_args(args)))


def print_front(data: StudyData, title: str) -> None:
    show(lambda console: front_view(data, title, console))


def print_trials(data: StudyData) -> None:
    show(lambda console: trials_view(data, console))


def print_closing(data: StudyData, title: str, tie: TieSettings | None = None) -> None:
    show(lambda console: closing_view(data, title, tie, console))


def _print_document(command: str, document: dict, rows: list, fmt: str) -> None:
    """``--format json|csv``: the records rendered as ``study.output.documents`` does."""
    from autotune.study.output.documents import render

    out.print(render(command, document, rows, fmt), end="", soft_wrap=True, markup=False,
              highlight=False)


def _judged(args: argparse.Namespace) -> StudyData:
    """The study's data judged at --smallest-difference where given (checked before the
    storage is opened: bad input is refused first), else at the study's own."""
    given = getattr(args, "smallest_difference", None)
    margin = None if given is None else parse_smallest_difference(given)
    data = _data(args)
    return data if margin is None else dataclasses.replace(data, smallest_difference=margin)


def cmd_pareto(args: argparse.Namespace) -> int:
    data = _judged(args)
    if args.format == "table":
        print_front(data, args.study)
        return 0
    from autotune.study.output.documents import front_records

    rows = front_records(data)
    _print_document("pareto", study_document("pareto", args.study, data, rows), rows, args.format)
    return 0


def cmd_trials(args: argparse.Namespace) -> int:
    """Every finished trial of the study (copies of another trial's engine left out, as every
    table leaves them): the trial table, or every field for scripts; the same records."""
    from autotune.study.output.documents import trial_record

    data = _data(args)
    if args.format == "table":
        print_trials(data)
        return 0
    rows = [trial_record(data, t) for t in data.outcomes]
    _print_document("trials", study_document("trials", args.study, data, rows), rows, args.format)
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    data = _judged(args)
    if not data.feasible:
        raise ConfigError(f"--study {args.study}: no feasible trial in the study yet: "
                          "run more trials first")
    uses = (args.use,) if args.use else default_uses(data)
    tie = TieSettings(args.study, data.smallest_difference)
    if args.format == "table":
        show(lambda console: recommendations_view(data, args.study, tie, uses, console,
                                                  explain=args.explain))
        return 0
    from autotune.study.output.documents import recommendation_record

    rows = [recommendation_record(data, r, use, tie.smallest_difference)
            for use, r in zip(uses, recommend_each(data, uses, tie), strict=True)]
    _print_document("recommend", study_document("recommend", args.study, data, rows), rows,
                    args.format)
    return 0


def cmd_studies(args: argparse.Namespace) -> int:
    """Every study in the storage: its trials counted apart (served, rejected, failed), the
    front's size, when it was created. Reads only: a storage that does not exist is an error,
    never created."""
    from autotune.study.output.documents import study_record
    from autotune.study.store.records import stored_studies
    from autotune.study.store.storage import redact

    storage = storage_of_args(args)
    rows = [study_record(s.name, s.data, trials=s.trials, unfinished=s.unfinished,
                         created=s.created) for s in stored_studies(storage)]
    if args.format != "table":
        _print_document("studies", {"storage": redact(storage), "studies": rows}, rows, args.format)
        return 0
    if not rows:
        out.print(f"no study in {redact(storage)}", soft_wrap=True)
        return 0
    out.print(f"studies in {redact(storage)}", soft_wrap=True, markup=False, highlight=False)
    show(lambda console: studies_view(rows, console))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autotune.study.output.export import export_of, pick_trial, writable_file
    from autotune.study.store.storage import load_existing

    output = writable_file(args.output, "--output") if args.output else None
    study = load_existing(args.study, storage_of_args(args))
    trial = pick_trial(study, number=args.trial, use=args.use)
    export = export_of(trial)
    text = export.render(args.format)
    if output is not None:
        output.write_text(text)
        console.print(f"wrote trial #{trial.number} as {args.format} to {args.output}")
    else:
        out.print(text, end="", soft_wrap=True, markup=False, highlight=False)
    if args.verify:
        return _verify(args, study, trial, export)
    return 0


def _verify(args, study, trial, export) -> int:
    """Relaunch the exported flags, benchmark the study's profiles again, print differences."""
    from autotune.study.run.session import relaunch

    measured = relaunch(study, trial, export.flags, export.model, workdir=Path(args.workdir),
                        say=console.print)
    if measured.failure:
        console.print(f"verify: the relaunch failed: {measured.failure.name}: {measured.failure_message}")
        return 1
    out.print(relaunch_table(trial, measured))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from autotune.study.output.report import report_folder, write_report
    from autotune.study.store.storage import load_existing

    out_dir = report_folder(Path(args.out) if args.out else Path(args.workdir) / "reports" / args.study)
    study = load_existing(args.study, storage_of_args(args))
    for path in write_report(study, out_dir):
        out.print(f"wrote {path}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from autotune.study.run.study_plan import model_context
    from autotune.study.store.importer import import_results, read_import

    space = read_space(locate_shipped(args.space))
    ctx = model_context(space, read_model_info(args.model)) if args.model else None
    storage = storage_of_args(args)
    read = read_import(Path(args.file), space, references=args.references,
                       profiles=args.profile or ["low-concurrency", "high-concurrency"],
                       objectives=args.objective, storage=storage, workdir=Path(args.workdir))
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    study = import_results(args.study, storage, read, ctx=ctx)
    for line in read.skipped:
        console.print(line)
    imported = [t for t in study.trials if t.user_attrs.get("imported_from")]
    out.print(f"study {args.study!r}: {len(imported)} imported trials "
              f"({', '.join(t.user_attrs['reference'] for t in imported)})")
    return 0


def cmd_dashboard(args: argparse.Namespace, serve=None) -> int:
    """optuna-dashboard on the study storage with the artifact store, on 127.0.0.1 only. The
    storage must exist (never created here) and is opened for writing: notes edited in the
    dashboard are saved in it. ``serve``: optuna-dashboard's ``run_server`` unless given (a
    test serves the app in process)."""
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import run_server

    from autotune.study.store.storage import dashboard_page, open_to_annotate, redact

    storage = storage_of_args(args)
    rdb = open_to_annotate(storage)
    artifacts = Path(args.workdir) / "artifacts"  # read where it exists; never created here
    url = f"http://127.0.0.1:{args.port}{dashboard_page(rdb, storage, args.study)}"
    console.print(f"optuna-dashboard for {redact(storage)} (artifacts: {artifacts}; notes "
                  "edited there are saved in the storage)")
    out.print(url, soft_wrap=True)
    (serve or run_server)(rdb, host="127.0.0.1", port=args.port,
                          artifact_store=FileSystemArtifactStore(str(artifacts)))
    return 0


def add_format(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=OUTPUT_FORMATS, default="table",
                   help="table: for people (default); json or csv: every field, for scripts, "
                        "with vLLM's metric names (docs/outputs.md)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pareto", help="the front of the study's objectives, with intervals")
    add_study_args(p)
    add_setting(p, SETTINGS_BY_FLAG["--smallest-difference"])
    add_format(p)
    p.set_defaults(handler=cmd_pareto)

    p = sub.add_parser("trials", help="every finished trial: outcome, flags, every metric with "
                       "its interval, start-up phases, how each run stopped (reads only)")
    add_study_args(p)
    add_format(p)
    p.set_defaults(handler=cmd_trials)

    p = sub.add_parser("recommend", help="pick a trial for each use: one compact table (--explain: "
                       "the full reasoning), undecided comparisons with their price in device "
                       "time")
    add_study_args(p)
    p.add_argument("--for", dest="use", choices=USES,
                   help="the use to recommend for: interactive (best on the lowest-concurrency "
                        "profile's objective), throughput (the highest's), balanced (the knee of "
                        "the front) (default: every use)")
    p.add_argument("--explain", action="store_true",
                   help="the full text of each recommendation: why, what is undecided, what "
                        "deciding it takes")
    add_setting(p, SETTINGS_BY_FLAG["--smallest-difference"])
    add_format(p)
    p.set_defaults(handler=cmd_recommend)

    p = sub.add_parser("studies", help="the studies in a storage: name, trials (served, rejected, "
                       "failed), front size, created (reads only)")
    p.add_argument("--storage", help="Optuna storage URL (default $AUTOTUNE_STORAGE, else "
                   "sqlite:///<workdir>/autotune.db)")
    add_format(p)
    p.set_defaults(handler=cmd_studies)

    p = sub.add_parser("export", help="launch flags of a trial: shell command, vllm serve --config YAML, JSON")
    add_study_args(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--trial", type=int, metavar="N",
                   help="the trial numbered N (as `pareto` and `recommend` show it, #N)")
    g.add_argument("--for", dest="use", choices=USES,
                   help="the trial `recommend --for USE` picks (default: balanced, the knee of "
                        "the front, when neither --trial nor --for is given)")
    p.add_argument("--format", choices=("shell", "yaml", "json"), default="shell",
                   help="shell: a `vllm serve` command line; yaml: a `vllm serve --config` file; "
                        "json: model, argv and config (default shell)")
    p.add_argument("--output", help="write to this file instead of stdout")
    p.add_argument("--verify", action="store_true",
                   help="relaunch the exported configuration, re-benchmark it, print the difference")
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser("report", help="Markdown + HTML report: the front, importance and effects")
    add_study_args(p)
    p.add_argument("--output", "--out", dest="out", help="output folder (default <workdir>/reports/<study>)")
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser("dashboard", help="optuna-dashboard on the study storage (127.0.0.1); "
                       "notes edited there are saved in the storage")
    add_study_args(p, missing="all")
    p.add_argument("--port", type=int, default=8080)
    p.set_defaults(handler=cmd_dashboard)

    p = sub.add_parser("import-results", help="add externally measured results as completed trials")
    p.add_argument("file", help=".csv or .json rows: reference or parameters, profile, metrics")
    add_study_args(p, missing="required")
    p.add_argument("--space", default=DEFAULT_SPACE)
    p.add_argument("--references", default=DEFAULT_REFERENCES)
    p.add_argument("--profile", action="append", choices=["low-concurrency", "high-concurrency"],
                   help="profiles to import (default both); configurations lacking one are skipped")
    p.add_argument("--objective", action="append", default=[],
                   help="PROFILE:METRIC[:min|max] (default: as `run`)")
    p.add_argument("--model", help="the model the results were measured with (a folder or a cached "
                   "hub id): its trials then have launch flags, for `export` (default: none)")
    p.set_defaults(handler=cmd_import)
