"""`autotune pareto | recommend | export | report | import-results`: acting on a finished study."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from autotune.cli import DEFAULT_REFERENCES, DEFAULT_SPACE, _fmt, _package_file, console, out
from autotune.core.analysis import (
    E2EL,
    THROUGHPUT,
    USES,
    beyond_noise,
    differing_params,
    pareto_front,
    recommend,
)
from autotune.core.profiles import PROFILES
from autotune.core.space import load_references, load_space
from autotune.errors import ConfigError


def _storage(args: argparse.Namespace) -> str:
    from autotune.study.storage import storage_url

    return storage_url(args.storage, f"sqlite:///{Path(args.workdir) / 'autotune.db'}")


def add_results_parsers(sub: argparse._SubParsersAction) -> None:
    def study_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--study", required=True)
        p.add_argument("--storage", help="Optuna storage URL (default $AUTOTUNE_STORAGE, else sqlite:///<workdir>/autotune.db)")

    p = sub.add_parser("pareto", help="the feasible non-dominated trials per profile")
    study_args(p)

    p = sub.add_parser("recommend", help="pick a trial for a use and say why")
    study_args(p)
    p.add_argument("--for", dest="use", choices=USES, required=True)

    p = sub.add_parser("export", help="launch flags of a trial: shell command, vllm serve --config YAML, JSON")
    study_args(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--trial", type=int)
    g.add_argument("--for", dest="use", choices=USES)
    p.add_argument("--format", choices=("shell", "yaml", "json"), default="shell")
    p.add_argument("--output", help="write to this file instead of stdout")
    p.add_argument("--verify", action="store_true",
                   help="relaunch the exported configuration, re-benchmark it, print the difference")

    p = sub.add_parser("report", help="Markdown + HTML report with plots, importance and effects")
    study_args(p)
    p.add_argument("--out", help="output folder (default <workdir>/reports/<study>)")

    add_dashboard_parser(sub)

    p = sub.add_parser("import-results", help="add externally measured results as completed trials")
    p.add_argument("file", help=".csv or .json rows: reference or parameters, profile, metrics")
    study_args(p)
    p.add_argument("--space", default=DEFAULT_SPACE)
    p.add_argument("--references", default=DEFAULT_REFERENCES)
    p.add_argument("--profile", action="append", choices=sorted(PROFILES),
                   help="profiles to import (default both); configurations lacking one are skipped")


def add_dashboard_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="optuna-dashboard on the study storage (127.0.0.1)")
    p.add_argument("--study", help="open this study's page")
    p.add_argument("--storage", help="Optuna storage URL (default $AUTOTUNE_STORAGE, else sqlite:///<workdir>/autotune.db)")
    p.add_argument("--port", type=int, default=8080)


def cmd_pareto(args: argparse.Namespace) -> int:
    from autotune.study.records import baseline_of, profiles_of, records
    from autotune.study.results import load_existing

    study = load_existing(args.study, _storage(args))
    recs = records(study)
    base = baseline_of(study, recs)
    for profile in profiles_of(study):
        table = Table(title=f"Pareto front at {profile} ({study.study_name})")
        for col in ("trial", "reference", "output tok/s", "mean E2EL ms", "differs from baseline",
                    "beyond noise"):
            table.add_column(col, justify="right" if "tok" in col or "ms" in col else "left")
        for r in pareto_front(recs, profile):
            noise = beyond_noise(r, base, profile, THROUGHPUT)
            table.add_row(str(r.number), r.reference, _fmt(r.value(profile, THROUGHPUT)),
                          _fmt(r.value(profile, E2EL), 0),
                          ", ".join(f"{k}={v}" for k, v in differing_params(r, base).items())
                          or "(baseline)", {True: "yes", False: "no", None: "-"}[noise])
        out.print(table)
    return 0


def cmd_recommend(args: argparse.Namespace) -> int:
    from autotune.study.records import baseline_of, profiles_of, records
    from autotune.study.results import load_existing

    study = load_existing(args.study, _storage(args))
    recs = records(study)
    rec = recommend(recs, profiles_of(study), args.use, baseline_of(study, recs))
    out.print(rec.reason, soft_wrap=True)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from autotune.study.results import export_of, load_existing, pick_trial

    study = load_existing(args.study, _storage(args))
    trial = pick_trial(study, number=args.trial, use=args.use)
    export = export_of(trial)
    text = export.render(args.format)
    if args.output:
        Path(args.output).write_text(text)
        console.print(f"wrote trial #{trial.number} as {args.format} to {args.output}")
    else:
        out.print(text, end="", soft_wrap=True, markup=False, highlight=False)
    if args.verify:
        return _verify(args, study, trial, export)
    return 0


def _verify(args, study, trial, export) -> int:
    """Relaunch the exported flags, benchmark the study's profiles again, print differences."""
    from autotune.cli import _cpu_slot
    from autotune.core.profiles import WorkloadProfile
    from autotune.shell.server import detect_platform
    from autotune.study.trial import BenchPlan, TrialSetup, run_trial

    profiles = tuple(WorkloadProfile(**p) for p in study.user_attrs.get("profile_specs", []))
    if not profiles:
        raise ConfigError(f"study {study.study_name!r} does not record its profiles; cannot verify")
    if detect_platform() != "cpu":
        raise ConfigError("--verify runs on the CPU build here; on GPUs relaunch with 'autotune run'")
    tp = int(export.argv[export.argv.index("--tensor-parallel-size") + 1])
    setup = TrialSetup(model=export.model, workdir=Path(args.workdir) / "verify" / f"trial-{trial.number}",
                       slot=_cpu_slot(tp, 1.0))  # entrypoint None: resolved as for any deployment
    vocab = int(study.user_attrs.get("vocab_size", 0))
    outcome = run_trial(export.argv, BenchPlan(profiles=profiles, vocab_size=vocab, seed=10_000),
                        setup, on_phase=lambda ph: console.print(f"verify: {ph}"))
    if outcome.failure:
        console.print(f"verify: the relaunch failed: {outcome.failure.value}: {outcome.message}")
        return 1
    stored = trial.user_attrs["metrics"]
    table = Table(title=f"trial #{trial.number}: stored vs relaunched")
    for col in ("profile", "metric", "stored", "relaunched", "difference"):
        table.add_column(col, justify="right")
    for name, result in outcome.results.items():
        for metric in (THROUGHPUT, E2EL, "mean_ttft_ms", "mean_tpot_ms"):
            a, b = stored[name][metric], result.mean(metric)
            table.add_row(name, metric, _fmt(a, 2), _fmt(b, 2), f"{(b - a) / a * 100:+.1f}%")
    out.print(table)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from autotune.study.report import write_report
    from autotune.study.results import load_existing

    study = load_existing(args.study, _storage(args))
    out_dir = Path(args.out) if args.out else Path(args.workdir) / "reports" / args.study
    for path in write_report(study, out_dir):
        out.print(f"wrote {path}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from autotune.study.importer import import_results

    space = load_space(_package_file(args.space))
    refs = load_references(_package_file(args.references), space)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    profiles = args.profile or ["low-concurrency", "high-concurrency"]
    study, skipped = import_results(args.study, _storage(args), Path(args.file), space, refs, profiles)
    for line in skipped:
        console.print(line)
    imported = [t for t in study.trials if t.user_attrs.get("imported_from")]
    out.print(f"study {args.study!r}: {len(imported)} imported trials "
              f"({', '.join(t.user_attrs['reference'] for t in imported)})")
    return 0



def cmd_dashboard(args: argparse.Namespace) -> int:
    """optuna-dashboard on the study storage with the artifact store, on 127.0.0.1 only."""
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import run_server

    from autotune.study.storage import redact

    storage = _storage(args)
    artifacts = Path(args.workdir) / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{args.port}/dashboard"
    if args.study:
        from autotune.study.results import load_existing

        study = load_existing(args.study, storage)
        url += f"/studies/{study._study_id}"
    console.print(f"optuna-dashboard for {redact(storage)} (artifacts: {artifacts})")
    out.print(url, soft_wrap=True)
    run_server(storage, host="127.0.0.1", port=args.port,
               artifact_store=FileSystemArtifactStore(str(artifacts)))
    return 0


COMMANDS = {"pareto": cmd_pareto, "recommend": cmd_recommend, "export": cmd_export,
            "report": cmd_report, "import-results": cmd_import, "dashboard": cmd_dashboard}
