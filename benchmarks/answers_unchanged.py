"""Answers unchanged across refactors (issue #48): fixed-seed studies and the H100 replay, run
again and compared with a reference taken before. Each study runs through the real ``StudyRunner``
with the tests' stand-in trial function; its dump is everything the study stores, less
``LEFT_OUT`` (what changes between two runs of one seed). docs/testing.md says what each covers.

    PYTHONPATH=$PWD nice .venv/bin/python benchmarks/answers_unchanged.py --out FILE.json
    PYTHONPATH=$PWD nice .venv/bin/python benchmarks/answers_unchanged.py \\
        --compare benchmarks/data/answers-600818f.json \\
        --replay benchmarks/data/search-quality-600818f.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import fnmatch
import hashlib
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # tests.helpers, where PYTHONPATH does not name this tree


def _find(name: str, *modules: str):
    """``name`` from the first of ``modules`` that defines it: a refactor that moves it adds its
    new module to the list (one line)."""
    for module in modules:
        found = getattr(importlib.import_module(module), name, None)
        if found is not None:
            return found
    raise ImportError(f"{name} is in none of {', '.join(modules)}: add its new module here")


# ---------------------------------------------------------------- what this script calls
# A refactor that moves one of these adds its new module to its line. The plan's request record
# is never named (its class is ``type(plan.request)``): renaming StudyRequest, BenchSpec or
# ConfirmationSchedule changes nothing here; renaming ``StudyPlan.request`` changes _capacity and
# _baseline (``plan.request``, 3 places).
StandIn = _find("StandIn", "tests.helpers")
CapacityStandIn = _find("CapacityStandIn", "tests.helpers", "tests.study.test_runner")
make_plan = _find("make_plan", "tests.helpers")
run = _find("run", "tests.helpers")  # the real StudyRunner on a given storage
ids = _find("ids", "tests.helpers")  # a built-in profile sending token ids
build_plan = _find("build_plan", "autotune.study.run.study_plan")
confirm = _find("confirm", "autotune.study.run.confirm_rounds")
TrialSetup = _find("TrialSetup", "autotune.study.run.trial_function")
beaten = _find("beaten", "autotune.core.trial.racing")
build_parser = _find("build_parser", "autotune.cli")  # `autotune`'s flags
request_of = _find("request_of", "autotune.cli.study")  # `run`'s flags to the study's request
# ----------------------------------------------------------------

TRIALS = 8
# Command lines whose request (`run`'s flags as the record the study stores) is dumped whole, as
# ``cli-requests``: the studies above build theirs without the command line.
COMMAND_LINES = (
    ("run",),
    ("run", "--profile", "low-concurrency", "--profile", "high-concurrency", "--num-prompts", "4",
     "--input-len", "64", "--output-len", "16", "--precision", "2%", "--smallest-difference", "3%",
     "--objective", "high-concurrency:output_throughput", "--slo", "high-concurrency:p99_ttft_ms<=500"),
    ("run", "--profile", "capacity", "--slo", "p99_ttft_ms<=2000", "--load-range", "2,64",
     "--time-budget", "30m", "--race", "--sampler", "random", "--seed", "3", "--confirm", "1"),
    ("run", "--model", "/models/m", "--space", "search_spaces/reference.yaml", "--references",
     "search_spaces/references.yaml", "--seed-references", "--baseline", "vllm-defaults",
     "--exploration", "sampler", "--calibrate", "--tp", "2", "--max-model-len", "8192",
     "--cap-cuda-graphs", "--repeats", "3", "--trials", "12", "--study", "x"),
    ("run", "--profile-file", "search_spaces/workloads.yaml", "--profile", "shared-prefix",
     "--profile", "random-text", "--storage", "sqlite:///elsewhere.db"),
)
USER_BASELINE = "--optimization-level 0 --max-num-seqs 64"  # -O0, and a flag no parameter tunes

# What varies between two runs of one seed, and nothing else (tests/bench/test_answers_unchanged.py
# checks both halves): a path's parts, each an fnmatch pattern.
LEFT_OUT: dict[tuple[str, ...], str] = {
    ("trials", "*", "datetime_start"): "wall clock: when the trial started",
    ("trials", "*", "datetime_complete"): "wall clock: when the trial ended",
    ("trials", "*", "user_attrs", "worker", "host"): "the machine that ran it",
    ("trials", "*", "user_attrs", "worker", "pid"): "the process that ran it",
    ("user_attrs", "uid"): "the study's random id (uuid4), by design",
    ("user_attrs", "time_budget_started_at"): "wall clock (set by `run`; not by these studies)",
}
# Kept, made the same each run: an artifact's id (a uuid4 Optuna draws) reads "<random>" and
# its key "artifacts:" + its file name (the figure's bytes are not compared); the runner's and
# the confirmation's clock stands still (``still``), so that a trial's wall (``trial_wall_s``),
# and the deployment costs the notes state from it, are 0 s every run.
ROWS_LEFT_OUT = {"cpu_s": "the replay's CPU time", "code": "the label given with --code"}
NOTE_PIECE = re.compile(r"^(dashboard:(?:\d+:)?)note_str:(\d+)$")
SHOWN = 5  # differences printed per study


# ---------------------------------------------------------------- the studies

Ran = tuple[optuna.Study, optuna.storages.BaseStorage]


def _tpe(tmp: Path, trials: int, seed: int) -> Ran:
    return _run(make_plan(tmp, trials=trials), StandIn(seed=seed))


def _random_race(tmp: Path, trials: int, seed: int) -> Ran:
    stand_in = StandIn(seed=seed)

    def racing(argv, bench, setup, on_phase):  # what run_trial does with the runner's front
        measured = stand_in(argv, bench, setup, on_phase)
        why = beaten(bench.race, measured.results) if bench.race and measured.results else ""
        return dataclasses.replace(measured, raced=why)

    return _run(make_plan(tmp, trials=trials, sampler="random", race=True, name="race"), racing)


def _confirm(tmp: Path, trials: int, seed: int) -> Ran:
    plan = make_plan(tmp, trials=trials, confirm=2, name="confirm")
    study, storage = _run(plan, StandIn(seed=seed + 1))  # not tpe's search again
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=plan.confirm,
            trial_fn=StandIn(seed=seed + 2), clock=still)
    return study, storage


def _capacity(tmp: Path, trials: int, seed: int) -> Ran:
    plan = make_plan(tmp, trials=trials, name="cap")  # writes the model and space; gives the record
    plan = build_plan(type(plan.request)(
        workdir=plan.workdir, profiles=(ids("low-concurrency"), ids("capacity")),
        model=plan.model.name, space_path=str(tmp / "space.yaml"),
        references_path=str(tmp / "refs.yaml"), trials=trials, repeats=2, seed=1,
        study_name="cap", slos=("p99_ttft_ms<=2000",)))
    stand_in = CapacityStandIn()
    stand_in.rng = np.random.default_rng(seed)  # its noise from this study's seed
    return _run(plan, stand_in)


def _baseline(tmp: Path, trials: int, seed: int) -> Ran:
    plan = make_plan(tmp, trials=trials, references=False, name="baseline")
    plan = build_plan(type(plan.request)(
        profiles=plan.request.profiles, model=plan.model.name, space_path=str(tmp / "space.yaml"),
        trials=trials, repeats=2, seed=1, workdir=plan.workdir, study_name="baseline",
        baseline=USER_BASELINE), parser=None)  # autotune's own reading: vLLM not imported
    return _run(plan, StandIn(seed=seed))


def still() -> float:
    """The wall clock of these studies: it does not move (no time budget is set)."""
    return 1_000_000.0


def _run(plan, trial_fn) -> Ran:
    storage = optuna.storages.InMemoryStorage()
    return run(plan, trial_fn, storage=storage, clock=still), storage


STUDIES: dict[str, Callable] = {"tpe": _tpe, "random-race": _random_race, "confirm": _confirm,
                                "capacity": _capacity, "baseline": _baseline}
CLI = "cli-requests"


def requests_dump() -> dict:
    """Each of ``COMMAND_LINES`` with every field of the request `run` builds from it."""
    out = {}
    with contextlib.chdir(ROOT):  # the command lines' paths are the repository's
        for argv in COMMAND_LINES:
            request = request_of(build_parser().parse_args(["--workdir", "studies", *argv]))
            out[shlex.join(argv)] = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}
    text = json.dumps({"requests": out}, sort_keys=True, default=_plain)
    return json.loads(text.replace(str(ROOT), "<repo>"))


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)  # a Path


# ---------------------------------------------------------------- the dump

def raw_dump(name: str, *, trials: int = TRIALS, seed: int = 0) -> dict:
    """Study ``name`` run in a fresh temporary folder: everything stored, nothing left out
    (paths under the folder read ``<tmp>``)."""
    with tempfile.TemporaryDirectory(prefix="answers-") as folder:
        tmp = Path(folder)
        study, storage = STUDIES[name](tmp, trials, seed)
        study_id = storage.get_study_id_from_name(study.study_name)
        doc = {
            "study_name": study.study_name,
            "directions": [d.name for d in study.directions],
            "user_attrs": study.user_attrs,
            "system_attrs": _notes_whole(_artifacts_by_name(storage.get_study_system_attrs(study_id))),
            "trials": [{
                "number": t.number, "state": t.state.name, "params": t.params,
                "distributions": {k: optuna.distributions.distribution_to_json(d)
                                  for k, d in t.distributions.items()},
                "values": t.values, "intermediate_values": t.intermediate_values,
                "user_attrs": t.user_attrs, "system_attrs": t.system_attrs,
                "datetime_start": t.datetime_start, "datetime_complete": t.datetime_complete,
            } for t in study.get_trials(deepcopy=False)],
        }
        text = json.dumps(doc, sort_keys=True, default=_text)
        for path in {str(tmp.resolve()), str(tmp)}:
            text = text.replace(path, "<tmp>")
        return json.loads(text)


def _artifacts_by_name(attrs: dict) -> dict:
    """Optuna keeps an artifact's meta as ``artifacts:<random id>``: keyed by its file name."""
    out = {k: v for k, v in attrs.items() if not k.startswith("artifacts:")}
    for k, v in attrs.items():
        if k.startswith("artifacts:"):
            meta = json.loads(v)
            out[f"artifacts:{meta['filename']}"] = {**meta, "artifact_id": "<random>"}
    return out


def _notes_whole(attrs: dict) -> dict:
    """The dashboard's notes in one piece each: optuna-dashboard cuts a note into 2,048-character
    pieces (``dashboard:note_str:0``, ``:1``, ...), where a longer path moves every cut."""
    out, pieces = {}, {}
    for k, v in attrs.items():
        if (found := NOTE_PIECE.match(k)) is None:
            out[k] = v
        else:
            pieces.setdefault(found[1], {})[int(found[2])] = v
    for head, texts in pieces.items():
        out[head + "note"] = "".join(texts[i] for i in sorted(texts))
    return out


def _text(value: object) -> str:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def pattern_of(path: tuple[str, ...]) -> tuple[str, ...] | None:
    """The pattern of ``LEFT_OUT`` that leaves ``path`` out, if one does."""
    return next((p for p in LEFT_OUT if len(p) == len(path)
                 and all(fnmatch.fnmatchcase(k, q) for k, q in zip(path, p, strict=True))), None)


def left_out(path: tuple[str, ...]) -> bool:
    return pattern_of(path) is not None


def leaves(doc: object, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    """Every value of ``doc`` with its path (list items by index); an empty container is one."""
    if isinstance(doc, dict) and doc:
        for k in sorted(doc):
            yield from leaves(doc[k], (*path, str(k)))
    elif isinstance(doc, list) and doc:
        for i, v in enumerate(doc):
            yield from leaves(v, (*path, str(i)))
    else:
        yield path, doc


def without_left_out(doc: object, path: tuple[str, ...] = ()) -> object:
    if isinstance(doc, dict):
        return {k: without_left_out(v, (*path, k)) for k, v in doc.items() if not left_out((*path, k))}
    if isinstance(doc, list):
        return [without_left_out(v, (*path, str(i))) for i, v in enumerate(doc)]
    return doc


def dump(name: str, *, trials: int = TRIALS, seed: int = 0) -> dict:
    if name == CLI:
        return requests_dump()
    return without_left_out(raw_dump(name, trials=trials, seed=seed))


def digest(study: dict) -> str:
    return hashlib.sha256(json.dumps(study, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ---------------------------------------------------------------- comparing

def _same(a: object, b: object) -> bool:
    return json.dumps(a) == json.dumps(b)  # NaN equals NaN, 1 differs from 1.0


def differences(before: object, after: object) -> tuple[int, list[str]]:
    """(fields compared, one line per difference) between two documents."""
    old, new = dict(leaves(before)), dict(leaves(after))
    lines = []
    for path in sorted(old.keys() | new.keys(), key=lambda p: [(not k.isdigit(), int(k) if k.isdigit()
                                                                  else k) for k in p]):
        where = "/".join(path)
        if path not in new:
            lines.append(f"{where}: {_short(old[path])} -> (gone)")
        elif path not in old:
            lines.append(f"{where}: (new) -> {_short(new[path])}")
        elif not _same(old[path], new[path]):
            lines.append(f"{where}: {_short(old[path])} -> {_short(new[path])}")
    return len(old.keys() | new.keys()), lines


def _short(value: object, width: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _trials(doc: dict) -> int:
    """A study's trials, or the command lines of ``cli-requests``."""
    return len(doc.get("trials", doc.get("requests", ()))) if isinstance(doc, dict) else 0


def compare_studies(reference: dict, now: dict) -> bool:
    same = True
    print(f"\n{'study':<12} {'trials':>9} {'fields':>7} {'differences':>11}")
    for name in sorted(reference.keys() | now.keys()):
        if name not in reference or name not in now:
            print(f"{name:<12} {'not in the reference' if name in now else 'not run':>29}")
            same = False
            continue
        before, after = reference[name], now[name]
        fields, lines = differences(before, after)
        trials = (f"{_trials(before)}" if _trials(before) == _trials(after)
                  else f"{_trials(before)}->{_trials(after)}")
        print(f"{name:<12} {trials:>9} {fields:>7} {len(lines):>11}")
        for line in lines[:SHOWN]:
            print(f"    {line}")
        if len(lines) > SHOWN:
            print(f"    ... and {len(lines) - SHOWN} more")
        same = same and not lines
    return same


# ---------------------------------------------------------------- the replay

def replay_command(rows: list[dict], out: Path) -> list[str]:
    """search_quality.py's command that made ``rows``: their budgets, seeds and strategies, and
    --calibrate where they were calibrated (none is the code's default at 600818f, as documented)."""
    if not rows:
        raise ValueError("no rows")
    seeds = sorted({r["seed"] for r in rows})
    if seeds != list(range(seeds[0], seeds[-1] + 1)):
        raise ValueError(f"seeds {seeds} are not a range")
    calibrated = {r["calibrate"] for r in rows}
    if len(calibrated) > 1:
        raise ValueError("rows both with and without --calibrate")
    return [sys.executable, str(ROOT / "benchmarks" / "search_quality.py"),
            "--budgets", ",".join(f"{b:g}s" for b in sorted({r["budget_s"] for r in rows})),
            "--first-seed", str(seeds[0]), "--seeds", str(len(seeds)),
            "--strategy", ",".join(sorted({r["strategy"] for r in rows})),
            *(["--calibrate"] if calibrated == {True} else []), "--out", str(out)]


def _rows_by_key(rows: list[dict]) -> dict[str, dict]:
    return {f"{r['strategy']}:seed{r['seed']}:{r['budget_s']:g}s":
            {k: v for k, v in r.items() if k not in ROWS_LEFT_OUT} for r in rows}


def compare_replay(reference: list[dict]) -> bool:
    with tempfile.TemporaryDirectory(prefix="replay-") as folder:
        out = Path(folder) / "rows.jsonl"
        command = replay_command(reference, out)
        print(f"\nreplay: {' '.join([Path(command[1]).relative_to(ROOT).as_posix(), *command[2:-2]])}",
              flush=True)
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if done.returncode != 0:
            print(f"replay failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
            return False
        now = [json.loads(line) for line in out.read_text().splitlines() if line]
    fields, lines = differences(_rows_by_key(reference), _rows_by_key(now))
    print(f"replay rows: {len(reference)} compared, {fields} fields, {len(lines)} differences "
          f"({', '.join(ROWS_LEFT_OUT)} left out)")
    for line in lines[:SHOWN]:
        print(f"    {line}")
    return not lines


# ---------------------------------------------------------------- the command

def _read(path: Path, what: str) -> object:
    """A reference file: a dump's studies, or search_quality.py's rows (``.jsonl``)."""
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in path.read_text().splitlines() if line]
        return json.loads(path.read_text())["studies"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _error(f"{what} {path}: {type(exc).__name__}: {exc}")


def _error(message: str) -> NoReturn:
    print(f"answers_unchanged: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the dump here (JSON)")
    ap.add_argument("--compare", type=Path, help="compare with this dump; exit 1 on a difference")
    ap.add_argument("--replay", type=Path, help="re-run search_quality.py as this file's rows were "
                    "made (JSON lines) and compare the rows; exit 1 on a difference")
    every = [*STUDIES, CLI]
    ap.add_argument("--studies", default=",".join(every), help=f"of {', '.join(every)}")
    args = ap.parse_args(argv)
    names = args.studies.split(",")
    if bad := [n for n in names if n not in every]:
        ap.error(f"--studies: {', '.join(bad)} unknown; valid: {', '.join(every)}")
    reference = _read(args.compare, "--compare") if args.compare else None
    rows = _read(args.replay, "--replay") if args.replay else None
    if rows is not None:
        try:
            replay_command(rows, Path("-"))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            _error(f"--replay {args.replay}: not search_quality.py's rows ({type(exc).__name__}: {exc})")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    studies = {name: json.loads(json.dumps(dump(name))) for name in names}
    print(f"{'study':<12} {'trials':>6} {'fields':>7}  sha256")
    for name, doc in studies.items():
        print(f"{name:<12} {_trials(doc):>6} {sum(1 for _ in leaves(doc)):>7}  {digest(doc)[:16]}")
    if args.out:
        args.out.write_text(json.dumps({
            "left_out": {"/".join(p): why for p, why in LEFT_OUT.items()},
            "paths": "<tmp>: the study's temporary folder", "studies": studies,
        }, sort_keys=True, indent=1) + "\n")
    same = True
    if reference is not None:
        same = compare_studies({k: v for k, v in reference.items() if k in names}, studies)
    if rows is not None:
        same = compare_replay(rows) and same
    if reference is not None or rows is not None:
        print("\nidentical" if same else "\nDIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
