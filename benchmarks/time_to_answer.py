"""Time to a trustworthy answer: device seconds, not trials. Replays of the recorded table.

Each replay is a real autotune study (`StudyRunner`, in-memory storage) whose trial function
looks configurations up in the recorded CPU table (`autotune.study.dev.replay.Replay`) and charges
a `DeviceClock` what each trial would have cost the machine: a rejected configuration its
validation (1 s), a failed one its recorded start-up and a teardown, a served one its recorded
start-up, the duration of each run it measures (requests x output tokens / its recorded output
throughput, warm-up included) and a teardown (5 s). Racing (`core.trial.racing`) runs as in a real
trial: a configuration beaten beyond the noise after its first runs pays for those alone.
After the search, the real confirmation (`study.run.confirm_rounds`, 3 finalists and the baseline, 2
rounds) runs on the same clock, and `recommend` picks on the confirmed numbers.

Per variant and seed: device minutes until the front of what was found reaches 80% and 95% of
the table's best hypervolume, minutes of the whole search and of search + confirmation, the
share of trials raced, and how far each confirmed recommendation falls short of the table's
best (as `benchmarks/sampler_efficiency.py`). Prints medians with 95% intervals over seeds and
saves the runs (JSON lines) and a plot of hypervolume against device time.

    python benchmarks/time_to_answer.py                 # 30 seeds, 60 trials, every variant
    python benchmarks/time_to_answer.py --summarize     # reprint the saved runs

``--engines``: a configuration is the engine vLLM resolves it to (`sampler_efficiency.engines_of`,
vLLM imported once), in the study and in the truth; a configuration of an engine already
measured is a copy ("same engine as #N"): no device time, not a trial, as in a real study.
``--startup-after-first RATIO``: the study's first served deployment is charged its recorded
start-up, every later one (confirmation included) RATIO times its recorded start-up. 0.67 is
a new configuration of a graph already compiled on the CPU build without AOT compilation
(docs/startup.md: ready in 33.6 s against 49.9 s with AOT, one start each), a what-if:
autotune keeps AOT. Failed deployments have no recorded start-up in this table either way.
``--truth-by-engine``: every configuration deployed as before, but the front judged by
engines as ``--engines`` judges it, so that both are measured against one truth.
``--summarize A.jsonl B.jsonl`` prints saved runs together and, for each variant replayed more
than one way, the difference per seed of each way minus each one listed before it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sampler_efficiency import (  # noqa: E402
    REFERENCES,
    SPACE,
    engine_id_of,
    engines_of,
    hv_curve,
    key_of,
    load_table,
    one_change_order,
    regret,
    truth_of,
)

from autotune.core.analysis.recommendation import NoFeasibleTrial, recommend  # noqa: E402
from autotune.core.analysis.table import RecordedTable  # noqa: E402
from autotune.core.plan.study_request import StudyRequest  # noqa: E402
from autotune.core.trial.outcome import Measurement  # noqa: E402
from autotune.core.workload.profiles import ProfileOverrides, get_profile  # noqa: E402
from autotune.study.dev.replay import DeviceClock, Replay, drawable  # noqa: E402
from autotune.study.run.confirm_rounds import confirm  # noqa: E402
from autotune.study.run.runner import StudyRunner  # noqa: E402
from autotune.study.run.study_plan import build_plan  # noqa: E402
from autotune.study.run.study_setup import prepare_study  # noqa: E402
from autotune.study.run.trial_function import BenchSpec, TrialSetup  # noqa: E402
from autotune.study.store.records import outcomes, study_data  # noqa: E402
from autotune.study.store.storage import Heartbeat  # noqa: E402
from benchmarks.seed_stats import median_difference, median_interval  # noqa: E402

TABLE = ROOT / "benchmarks" / "data" / "cpu-table" / "table.csv"
OUT = ROOT / "benchmarks" / "data" / "cpu-table" / "time-to-answer.jsonl"
# label -> (sampler, the one-change grid enqueued, racing)
VARIANTS = {"tpe+race": ("tpe", False, True), "tpe": ("tpe", False, False),
            "random+race": ("random", False, True), "random": ("random", False, False),
            "grid": ("random", True, False)}
# The recorded protocol (the table's header): 16 requests of 256 in / 64 out per run, sent as
# random token ids (as the table was recorded; the replay's model has no tokenizer either).
RECORDED = ProfileOverrides(num_prompts=16, input_len=256, output_len=64, token_ids=True)
# What-if: runs of the reference study's protocol (100 requests of 512 in / 256 out) at the
# recorded throughputs: the same configurations, benchmarks that cost what the README's do.
REFERENCE = ProfileOverrides(num_prompts=100, input_len=512, output_len=256, token_ids=True)


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a replay charges and counts beyond its variant and seed (the defaults: as recorded)."""

    noise_scale: float = 1.0  # the recorded noise between runs, times this
    protocol: ProfileOverrides = RECORDED
    engines: Mapping[tuple[str, ...], str] | None = None  # argv -> engine; None: its parameters
    copies: bool = False  # with engines: an engine already measured is a copy, never deployed
    startup_after_first: float | None = None  # later start-ups times this; None: as recorded


class WarmStartups:
    """``replay`` with every deployment after the first served one charged ``ratio`` times
    its recorded start-up (the clock and the start-up it reports)."""

    def __init__(self, replay: Replay, ratio: float) -> None:
        self.replay, self.ratio, self.started = replay, ratio, False

    def __call__(self, argv: Sequence[str], bench: BenchSpec, setup: TrialSetup,
                 on_phase: Callable[[str], None]) -> Measurement:
        m = self.replay(argv, bench, setup, on_phase)
        if not m.startup_s:  # rejected, or failed without a recorded start-up
            return m
        if not self.started:
            self.started = True
            return m
        saved = (1 - self.ratio) * m.startup_s
        self.replay.clock.now -= saved
        return dataclasses.replace(m, startup_s=m.startup_s - saved)


def quieter(table: RecordedTable, scale: float) -> RecordedTable:
    """The table with each configuration's runs pulled towards their geometric mean: the noise
    between runs times ``scale``, the means (the truth) unchanged in the log scale."""
    if scale == 1.0:
        return table
    rows = []
    for row in table.rows:
        runs = {}
        for profile, rs in row.runs.items():
            positive = [m for m in rs[0] if all(r[m] > 0 for r in rs)]  # a 0 (no TPOT) stays
            center = {m: float(np.exp(np.mean([np.log(r[m]) for r in rs]))) for m in positive}
            runs[profile] = tuple({m: center[m] * (v / center[m]) ** scale if m in center else v
                                   for m, v in r.items()} for r in rs)
        rows.append(dataclasses.replace(row, runs=runs))
    return dataclasses.replace(table, rows=tuple(rows))


def one(label: str, seed: int, budget: int, model_dir: str, setting: Setting = Setting()) -> dict:
    sampler, grid, race = VARIANTS[label]
    noise_scale, protocol = setting.noise_scale, setting.protocol
    table = quieter(load_table(TABLE)[0], noise_scale)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        plan = build_plan(StudyRequest(
            workdir=Path(tmp), profiles=tuple(get_profile(p, protocol) for p in table.profiles),
            model=model_dir, space_path=str(SPACE),
            references_path=str(REFERENCES) if grid else None, trials=budget, repeats=2,
            seed=seed, sampler=sampler, study_name="replay", storage=f"sqlite:///{tmp}/r.db",
            race=race, confirm=3))
        if grid:
            plan = dataclasses.replace(plan, references=one_change_order(plan, seed))
        storage = optuna.storages.InMemoryStorage()
        prepare_study(plan, Heartbeat(), storage)
        clock = DeviceClock()
        replay = Replay(table, plan.space, plan.ctx, seed, clock)
        trial_fn = (replay if setting.startup_after_first is None
                    else WarmStartups(replay, setting.startup_after_first))
        setup = TrialSetup(model="", workdir=Path(tmp))
        engine_id = engine_id_of(setting.engines if setting.copies else None)
        study = StudyRunner(plan, setup, trial_fn=trial_fn, storage=storage, poll_s=0.01,
                            clock=clock, engine_id=engine_id).work()
        found = [t for t in outcomes(study) if t.state == "complete"]
        search_s = clock.now
        elapsed = list(np.cumsum([t.trial_wall_s or 0.0 for t in found]))
        confirm(study, plan, setup, k=3, trial_fn=trial_fn)
        key = key_of(setting.engines, plan)
        truth = truth_of(drawable(table, plan.space, plan.ctx), plan.objectives, key)
        data = study_data(study)
        picks = {}
        for use in ("interactive", "throughput"):
            try:
                pick = recommend(data, use).trial
                picks[use] = (key(pick.params) == truth.best_for[use], regret(pick, use, truth, key))
            except NoFeasibleTrial:
                picks[use] = None
    flags = ({} if setting.engines is None else
             {"engines": True} if setting.copies else {"truth_by_engine": True}) | (
        {} if setting.startup_after_first is None else
        {"startup_after_first": setting.startup_after_first})
    return {"label": label, "seed": seed, "budget": budget, "noise_scale": noise_scale,
            "curve": [round(v, 4) for v in hv_curve(found, truth, key)],
            "elapsed_s": [round(float(e), 1) for e in elapsed], "search_s": round(search_s, 1),
            "total_s": round(clock.now, 1), "raced": sum(bool(t.raced) for t in found),
            "served": sum(t.failure is None for t in found), "picks": picks} | flags


def variant(run: dict) -> str:
    """A saved run's row: its label, and the flags it was replayed with."""
    ratio = run.get("startup_after_first")
    return run["label"] + (" --engines" if run.get("engines") else "") + (
        " --truth-by-engine" if run.get("truth_by_engine") else "") + (
        "" if ratio is None else f" --startup-after-first {ratio:g}")


def minutes_to(run: dict, share: float) -> float:
    """Device minutes until the curve reaches ``share``; inf where it never does."""
    i = next((i for i, v in enumerate(run["curve"]) if v >= share - 1e-12), None)
    return run["elapsed_s"][i] / 60 if i is not None else float("inf")


def cell(values: list[float]) -> str:
    finite = [v for v in values if np.isfinite(v)]
    if len(finite) < len(values) / 2:
        return f"> budget ({len(finite)}/{len(values)} reached)"
    m = median_interval([v if np.isfinite(v) else 1e9 for v in values])
    hi = "> budget" if m.high >= 1e8 else f"{m.high:.0f}"
    return f"{m.value:.0f} [{m.low:.0f}, {hi}]"


def capped(values: Sequence[float]) -> list[float]:
    """Never reached (inf) as 1e9 minutes, so that medians and intervals say "> budget"."""
    return [v if np.isfinite(v) else 1e9 for v in values]


MEASURES: dict[str, Callable[[dict], float]] = {
    "minutes to 95%": lambda r: minutes_to(r, 0.95),
    "minutes to 80%": lambda r: minutes_to(r, 0.8),
    "search + confirm minutes": lambda r: r["total_s"] / 60}


def paired(after: list[dict], before: list[dict]) -> list[str]:
    """Per seed replayed both ways: after minus before, median [95% interval] of the
    differences. A side that never reached a share counts as 1e9 minutes (a difference
    printed "budget"); a seed where neither side reached it says nothing and is left out."""
    base = {r["seed"]: r for r in before}
    pairs = [(r, base[r["seed"]]) for r in after if r["seed"] in base]

    def minutes(v: float) -> str:
        return "+budget" if v >= 1e8 else "-budget" if v <= -1e8 else f"{v:+.0f}"
    lines = []
    for name, f in MEASURES.items():
        both = [(x, y) for x, y in zip(capped([f(x) for x, _ in pairs]),
                                       capped([f(y) for _, y in pairs]), strict=True)
                if min(x, y) < 1e8]
        counts = (f"{len(both)} of {len(pairs)} seeds paired, {sum(max(x, y) < 1e8 for x, y in both)}"
                  " reached on both sides")
        if not both:
            lines.append(f"{name}: not reached on either side ({len(pairs)} seeds)")
            continue
        d = median_interval([x - y for x, y in both])
        lines.append(f"{name}: {minutes(d.value)} [{minutes(d.low)}, {minutes(d.high)}] "
                     f"({d.verdict}; {counts})")
    return lines


def summarize(results: list[dict]) -> str:
    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(variant(r), []).append(r)
    lines = ["| variant | min to 80% | min to 95% | search min | search + confirm min | "
             "raced | interactive short of best | throughput short of best |", "|---" * 8 + "|"]
    for label, runs in by.items():
        short = {use: [r["picks"][use][1] * 100 for r in runs if r["picks"].get(use)]
                 for use in ("interactive", "throughput")}
        raced = statistics.fmean(r["raced"] / max(len(r["curve"]), 1) for r in runs)
        lines.append(
            f"| {label} ({len(runs)} seeds) | {cell([minutes_to(r, 0.8) for r in runs])} | "
            f"{cell([minutes_to(r, 0.95) for r in runs])} | {cell([r['search_s'] / 60 for r in runs])} | "
            f"{cell([r['total_s'] / 60 for r in runs])} | {raced:.0%} | "
            + " | ".join(f"{cell(short[u])}%" if short[u] else "-" for u in ("interactive", "throughput"))
            + " |")
    if "tpe+race" in by and "tpe" in by:
        a, b = by["tpe+race"], by["tpe"]
        lines.append("")
        for name, f in MEASURES.items():
            x, y = capped(list(map(f, a))), capped(list(map(f, b)))
            d = median_difference(x, y)
            rel = statistics.median(x) / statistics.median(y) - 1 if statistics.median(y) < 1e8 else float("nan")
            lines.append(f"racing vs not (TPE), {name}: {d.value:+.0f} [{d.low:+.0f}, {d.high:+.0f}] "
                         f"min ({d.verdict}), {rel:+.0%} of the median")
        for use in ("interactive", "throughput"):
            x = [r["picks"][use][1] * 100 for r in a if r["picks"].get(use)]
            y = [r["picks"][use][1] * 100 for r in b if r["picks"].get(use)]
            d = median_difference(x, y)
            lines.append(f"racing vs not (TPE), {use} recommendation short of best: "
                         f"{d.value:+.1f} [{d.low:+.1f}, {d.high:+.1f}] points ({d.verdict})")
    names = list(by)
    for i, name in enumerate(names):
        for earlier in names[:i]:
            if by[earlier][0]["label"] == by[name][0]["label"]:
                lines += ["", f"{name} minus {earlier}, paired by seed (minutes):"]
                lines += [f"  {line}" for line in paired(by[name], by[earlier])]
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    grid = np.linspace(0, max(max(r["elapsed_s"]) for r in results) / 60, 200)
    for label in dict.fromkeys(map(variant, results)):
        runs = [r for r in results if variant(r) == label]
        curves = np.array([[max([v for v, e in zip(r["curve"], r["elapsed_s"], strict=True) if e / 60 <= g],
                                default=0.0) for g in grid] for r in runs])
        med = np.median(curves, axis=0) * 100
        lo, hi = (np.percentile(curves, q, axis=0) * 100 for q in (25, 75))
        ax.plot(grid, med, label=f"{label} (median of {len(runs)} seeds)")
        ax.fill_between(grid, lo, hi, alpha=0.15)
    ax.axhline(95, color="#868e96", linestyle=":", linewidth=1)
    ax.set_xlabel("device minutes (recorded start-up + runs + teardown)")
    ax.set_ylabel("hypervolume found, % of the table's best")
    ax.set_title("Time to an answer on the recorded CPU table (shaded: quartiles)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--only", help="comma-separated variants")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--noise-scale", type=float, default=1.0,
                    help="scale the recorded noise between runs (0.2: a fifth; means unchanged)")
    ap.add_argument("--protocol", choices=("recorded", "reference"), default="recorded",
                    help="runs as recorded (16 x 64 tokens) or as the reference protocol costs "
                         "them (100 x 256 tokens at the recorded throughputs)")
    ap.add_argument("--engines", action="store_true",
                    help="a configuration of an engine already measured is a copy: no device "
                         "time, not a trial (imports vLLM once to resolve the table)")
    ap.add_argument("--truth-by-engine", action="store_true",
                    help="deploy every configuration, but judge the front by engines as "
                         "--engines does (the same truth for both)")
    ap.add_argument("--startup-after-first", type=float, metavar="RATIO",
                    help="charge every deployment after the first served one RATIO x its recorded "
                         "start-up (0.67: the CPU build without AOT, a what-if; docs/startup.md)")
    ap.add_argument("--out", type=Path, help="save the runs here (default: time-to-answer"
                    "[-engines|-truth-by-engine][-startupRATIO][-noiseS][-reference].jsonl beside the "
                    "table)")
    ap.add_argument("--summarize", type=Path, nargs="*",
                    help="replay nothing: reprint the saved runs (default: those the other flags "
                         "name), or of these files together")
    args = ap.parse_args()
    ratio = args.startup_after_first
    if args.engines and args.truth_by_engine:
        ap.error("--truth-by-engine: --engines judges by engines already; give one of them")
    if ratio is not None and not 0 < ratio <= 10:
        ap.error(f"--startup-after-first: {ratio:g} is not a ratio in (0, 10]")
    tag = ("-engines" if args.engines else "-truth-by-engine" if args.truth_by_engine else "") + (
        "" if ratio is None else f"-startup{ratio:g}") + (
        "" if args.noise_scale == 1.0 else f"-noise{args.noise_scale:g}") + (
        "" if args.protocol == "recorded" else "-reference")
    out = args.out or OUT.with_name(f"time-to-answer{tag}.jsonl")
    if args.summarize is None:
        model_dir = Path(tempfile.mkdtemp(prefix="replay-model-"))
        (model_dir / "config.json").write_text((TABLE.parent / "model-config.json").read_text())
        engines = (engines_of(load_table(TABLE)[0], model_dir)
                   if args.engines or args.truth_by_engine else None)
        if engines is not None:
            print(f"{len(engines)} configurations of the table resolve to "
                  f"{len(set(engines.values()))} engines", file=sys.stderr)
        labels = args.only.split(",") if args.only else list(VARIANTS)
        results = []
        with ProcessPoolExecutor(args.jobs) as pool:
            setting = Setting(args.noise_scale, REFERENCE if args.protocol == "reference" else RECORDED,
                              engines, args.engines, ratio)
            jobs = [pool.submit(one, label, seed, args.budget, str(model_dir), setting)
                    for seed in range(args.seeds) for label in labels]
            for i, job in enumerate(as_completed(jobs), 1):
                results.append(job.result())
                print(f"{i}/{len(jobs)} replays", file=sys.stderr, flush=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in results))
    paths = args.summarize or [out]
    results = [json.loads(line) for path in paths for line in path.read_text().splitlines()]
    print(summarize(results))
    png = paths[0].with_suffix(".png")
    plot(results, png)
    print(f"saved {png}" if args.summarize else f"saved {paths[0]} and {png}")


if __name__ == "__main__":
    main()
