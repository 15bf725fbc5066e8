"""Does the search beat the grid and random search? Samplers replayed against a recorded table.

Each replay is a real autotune study (`StudyRunner`, in-memory storage, references, duplicates,
failures, budget) whose trial function looks configurations up in the table recorded by
`benchmarks/record_table.py` (`autotune.study.dev.replay`): a served configuration returns runs
drawn with replacement from its recorded runs, so noise is part of every replay; a failed one
returns its failure. Per sampler and seed it measures, on the table's means (the truth):

- trials until the front of the served configurations found reaches 95% (and 80%) of the best
  hypervolume (interactive latency against throughput under load, each scaled to [0, 1] over
  the table; the nadir of the table is the reference point);
- the hypervolume after 10 and 20 trials, as a share of the best;
- whether `autotune recommend` (its real code, on the trials so far) picks the configuration
  that the table says is best for interactive and for throughput use, and how far off it is.

    python benchmarks/sampler_efficiency.py                      # 30 seeds, every sampler
    python benchmarks/sampler_efficiency.py --seeds 5 --only tpe,random

Trials count as the budget counts them: a rejected or crashing configuration is a trial (it
costs a launch, or a validation), a copy (a configuration of an engine already measured:
never deployed, its values told to the sampler) is not. The replay draws the reference space
as studies do (the KV-cache interleave only with decode context parallel, so never here);
with `--engines` a configuration is its engine (vLLM's resolution, imported once), in the
study and in the truth, where the recorded deployments of one engine are averaged.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.analysis.recommendation import NoFeasibleTrial, recommend  # noqa: E402
from autotune.core.analysis.study_data import StudyData, noise_of  # noqa: E402
from autotune.core.analysis.table import NOT_REACHED, RecordedTable, fill_unreached, parse_csv  # noqa: E402
from autotune.core.deployment.flags import to_argv  # noqa: E402
from autotune.core.maths.pareto import hypervolume_2d  # noqa: E402
from autotune.core.plan.study_request import StudyRequest  # noqa: E402
from autotune.core.space.search_space import (  # noqa: E402
    Reference,
    ReferenceSet,
    Value,
    complete,
    drawable_points,
    params_key,
)
from autotune.core.trial.outcome import TrialOutcome  # noqa: E402
from autotune.core.workload.profiles import ProfileOverrides, get_profile  # noqa: E402
from autotune.errors import ValidationError  # noqa: E402
from autotune.shell.bench.files import read_model_info, read_space  # noqa: E402
from autotune.study.dev.replay import Replay, drawable  # noqa: E402
from autotune.study.run.runner import StudyRunner  # noqa: E402
from autotune.study.run.samplers import make_sampler  # noqa: E402
from autotune.study.run.study_plan import StudyPlan, build_plan, model_context  # noqa: E402
from autotune.study.run.study_setup import prepare_study  # noqa: E402
from autotune.study.run.trial_function import TrialSetup  # noqa: E402
from autotune.study.store.records import outcomes  # noqa: E402
from autotune.study.store.storage import Heartbeat  # noqa: E402
from benchmarks.seed_stats import median_difference, median_interval, proportion_interval  # noqa: E402

Key = Callable[[Mapping[str, Value]], str]  # a configuration's key in the truth
TABLE = ROOT / "benchmarks" / "data" / "cpu-table" / "table.csv"
SPACE = ROOT / "search_spaces" / "reference.yaml"
REFERENCES = ROOT / "search_spaces" / "references.yaml"
THRESHOLD = 0.95
# Launched with expert parallel (YaRN on, so not rejected by validation): crashes on the CPU build.
LAUNCHABLE_EP = {"expert_parallel": True, "yarn": True}


# label -> (sampler name, references first, sampler factory)
VARIANTS = {
    "tpe": ("tpe", False, make_sampler),
    "tpe+refs": ("tpe", True, make_sampler),
    "tpe-startup10": ("tpe", False, functools.partial(make_sampler, startup_trials=10)),
    "tpe-startup10+refs": ("tpe", True, functools.partial(make_sampler, startup_trials=10)),
    "random": ("random", False, make_sampler),
    "random+refs": ("random", True, make_sampler),
    "nsga2": ("nsga2", False, make_sampler),
    "nsga2+refs": ("nsga2", True, make_sampler),
    "gp": ("gp", False, make_sampler),
    "gp+refs": ("gp", True, make_sampler),
    "grid": ("random", True, make_sampler),  # the whole grid enqueued in one-change order
}


# ------------------------------------------------------------------------------ the truth


@dataclasses.dataclass(frozen=True)
class Truth:
    """The table's means: costs per served configuration, scaled to [0, 1] over the table."""

    costs: dict[str, tuple[float, float]]  # key -> (latency, -throughput), scaled
    best_hv: float
    best_for: dict[str, str]  # use -> key of the best served configuration
    raw: dict[str, tuple[float, float]]  # key -> (mean E2EL ms, output tok/s)


def truth_of(table: RecordedTable, objectives, key: Key = params_key) -> Truth:
    """The truth per ``key`` of a configuration: its parameters, or (``--engines``) the engine
    they resolve to, whose recorded deployments are averaged."""
    low, high = objectives[0], objectives[-1]
    means: dict[str, list[tuple[float, float]]] = {}
    for r in table.rows:
        if r.served:
            means.setdefault(key(r.params), []).append(
                (r.mean(low.profile, low.metric), r.mean(high.profile, high.metric)))
    raw = {k: (statistics.fmean(a for a, _ in v), statistics.fmean(b for _, b in v))
           for k, v in means.items()}
    lat = [v[0] for v in raw.values()]
    tput = [v[1] for v in raw.values()]
    costs = {k: ((a - min(lat)) / (max(lat) - min(lat)),
                 (max(tput) - b) / (max(tput) - min(tput))) for k, (a, b) in raw.items()}
    return Truth(costs, hypervolume_2d(list(costs.values()), (1.0, 1.0)),
                 {"interactive": min(raw, key=lambda k: raw[k][0]),
                  "throughput": max(raw, key=lambda k: raw[k][1])}, raw)


def hv_curve(found: Sequence[TrialOutcome], truth: Truth, key: Key = params_key) -> list[float]:
    """Share of the best hypervolume after each trial (true means of what was found)."""
    seen: set[str] = set()
    curve = []
    for t in found:
        if t.failure is None:
            seen.add(key(t.params))
        curve.append(hypervolume_2d([truth.costs[k] for k in seen if k in truth.costs],
                                    (1.0, 1.0)) / truth.best_hv)
    return curve


def regret(pick: TrialOutcome, use: str, truth: Truth, key: Key = params_key) -> float:
    """How much worse than the table's best the pick is, by the table's means (0 = the best)."""
    got, best = truth.raw[key(pick.params)], truth.raw[truth.best_for[use]]
    return got[0] / best[0] - 1 if use == "interactive" else 1 - got[1] / best[1]


# ------------------------------------------------------------------------------ one replay


def one_change_order(plan: StudyPlan, seed: int) -> ReferenceSet:
    """The reference study's grid: its configs in their order (the baseline, then one change
    at a time), then every other combination by its distance from the baseline (ties in a
    seeded order)."""
    refs = plan.references
    assert refs is not None
    given = [complete(plan.space, plan.ctx, c.params) for c in refs.configs]
    base = given[[c.name for c in refs.configs].index(refs.baseline)]
    rng = random.Random(seed)
    rest = drawable_points(plan.space, plan.ctx)
    rng.shuffle(rest)
    rest.sort(key=lambda p: sum(p[k] != base[k] for k in p))
    keys = {params_key(p) for p in given}
    order = given + [p for p in rest if params_key(p) not in keys]
    return ReferenceSet("one-change grid", tuple(
        Reference(f"grid-{i}", p) for i, p in enumerate(order)), refs.baseline and "grid-0")


def replay(table: RecordedTable, model_dir: Path, label: str, seed: int, budget: int,
           engines: dict[tuple[str, ...], str] | None = None) -> tuple[list[TrialOutcome], StudyPlan]:
    sampler, refs_first, factory = VARIANTS[label]
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        plan = build_plan(StudyRequest(
            # The table was recorded sending random token ids; the model here has no tokenizer.
            workdir=Path(tmp), profiles=tuple(get_profile(p, ProfileOverrides(token_ids=True))
                                              for p in table.profiles),
            model=str(model_dir), space_path=str(SPACE),
            references_path=str(REFERENCES) if refs_first else None, trials=budget,
            repeats=2, seed=seed, sampler=sampler, study_name="replay",
            storage=f"sqlite:///{tmp}/replay.db"))
        if label == "grid":
            plan = dataclasses.replace(plan, references=one_change_order(plan, seed))
        storage = optuna.storages.InMemoryStorage()
        prepare_study(plan, Heartbeat(), storage)
        trial_fn = Replay(table, plan.space, plan.ctx, seed)
        study = StudyRunner(plan, TrialSetup(model="", workdir=Path(tmp)), trial_fn=trial_fn,
                            sampler_fn=factory, storage=storage, poll_s=0.01,
                            engine_id=engine_id_of(engines)).work()
        found = [t for t in outcomes(study) if t.state == "complete"]
    return found, plan


@functools.cache
def load_table(path: Path) -> tuple[RecordedTable, str]:
    """The table, with configurations the recording did not reach inferred where every
    measured one like them failed (expert parallel crashes on the CPU build); and what was
    inferred, to print."""
    table = parse_csv(path.read_text(), str(path))
    if not table.count(NOT_REACHED):
        return table, ""
    return fill_unreached(table, LAUNCHABLE_EP)


def engines_of(table: RecordedTable, model_dir: Path) -> dict[tuple[str, ...], str]:
    """argv -> the engine vLLM resolves it to, for every configuration of the table that a
    study of the space draws (vLLM's own resolution, ``shell.server.validation.engine_identity``)."""
    from autotune.shell.server.validation import VllmValidator, engine_identity

    space, model = read_space(SPACE), read_model_info(str(model_dir))
    ctx = model_context(space, model)
    validator, found = VllmValidator(), {}
    for row in drawable(table, space, ctx).rows:
        argv = tuple(to_argv(space, ctx, row.params))
        try:
            found[argv] = engine_identity(validator, model.name, argv)
        except ValidationError:
            pass
    return found


def engine_id_of(engines: Mapping[tuple[str, ...], str] | None) -> Callable[[Sequence[str]], str] | None:
    """The runner's ``engine_id`` seam over ``engines_of``'s answer: a configuration of an
    engine already measured is a copy, never deployed ("" where vLLM rejects it); None
    without ``--engines`` (a configuration is its parameters)."""
    return (lambda argv: engines.get(tuple(argv), "")) if engines is not None else None


def key_of(engines: Mapping[tuple[str, ...], str] | None, plan: StudyPlan) -> Key:
    """A configuration's key in the truth: its engine where ``engines`` resolves it, else its
    parameters."""
    def key(params: Mapping[str, Value]) -> str:
        if engines is None:
            return params_key(params)
        return engines.get(tuple(to_argv(plan.space, plan.ctx, dict(params))), params_key(params))
    return key


def score(label: str, seed: int, table_path: str, model_dir: str, budget: int,
          engines: dict[tuple[str, ...], str] | None = None) -> dict:
    table, _ = load_table(Path(table_path))
    t0 = time.monotonic()
    found, plan = replay(table, Path(model_dir), label, seed, budget, engines)
    key = key_of(engines, plan)
    truth = truth_of(drawable(table, plan.space, plan.ctx), plan.objectives, key)
    curve = [round(v, 4) for v in hv_curve(found, truth, key)]
    defaults = {p.name: p.default for p in plan.space.parameters}
    picks = {}
    prefix = found[:20]
    data = StudyData(tuple(prefix), plan.objectives, noise_of(prefix), None, defaults)
    for use in ("interactive", "throughput"):
        try:
            pick = recommend(data, use).trial
        except NoFeasibleTrial:
            picks[f"{use}@20"] = None
            continue
        picks[f"{use}@20"] = (key(pick.params) == truth.best_for[use],
                              regret(pick, use, truth, key))
    return {"label": label, "seed": seed, "budget": budget, "curve": curve,
            "served": [t.failure is None for t in found],
            "trials": len(found), "picks": picks, "seconds": time.monotonic() - t0}


# ------------------------------------------------------------------------------ statistics


def fmt_trials(value: float, budget: int) -> str:
    return f">{budget}" if value > budget else f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def trials_to(curve: Sequence[float], share: float, budget: int) -> int:
    """Trials until the curve reaches ``share`` of the best; budget + 1 when it never does."""
    return next((i + 1 for i, v in enumerate(curve) if v >= share - 1e-12), budget + 1)


def at(curve: Sequence[float], n: int) -> float:
    return curve[min(n, len(curve)) - 1] * 100


def versus(values: dict[str, list[float]], label: str, base: str, words: tuple[str, str]) -> str:
    if label == base or base not in values:
        return "-"
    d = median_difference(values[label], values[base])
    verdict = {"below": words[0], "above": words[1], "tie": "tie"}[d.verdict]
    return f"{d.value:+.0f} [{d.low:+.0f}, {d.high:+.0f}] {verdict}"


def summarize(results: list[dict], budget: int, grid_size: int, base: str) -> str:
    by: dict[str, list[dict]] = {}
    for r in results:
        by.setdefault(r["label"], []).append(r)
    to = {share: {k: [trials_to(r["curve"], share, budget) for r in v] for k, v in by.items()}
          for share in (THRESHOLD, 0.8)}
    hv20 = {k: [at(r["curve"], 20) for r in v] for k, v in by.items()}

    def trials(values: list[float]) -> str:
        m = median_interval(values)
        return " ".join([fmt_trials(m.value, budget),
                         f"[{fmt_trials(m.low, budget)}, {fmt_trials(m.high, budget)}]"])

    def pct(values: list[float]) -> str:
        m = median_interval(values)
        return f"{m.value:.0f}% [{m.low:.0f}, {m.high:.0f}]"

    lines = [f"Search (grid: {grid_size} configurations; medians over seeds [95% bootstrap "
             f"intervals]; >{budget}: not reached in the budget; HV: share of the table's best "
             "hypervolume)", "",
             "| sampler | seeds | trials to 95% | trials to 80% | to 80% vs random | HV@10 | HV@20 |"
             " HV@20 vs random (points) | served @20 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, runs in by.items():
        served = [100 * sum(r["served"][:20]) / min(20, len(r["served"]))
                  for r in runs if "served" in r]  # not in results saved before it was
        lines.append(
            f"| {label} | {len(runs)} | {trials(to[THRESHOLD][label])} | {trials(to[0.8][label])} | "
            f"{versus(to[0.8], label, base, ('fewer', 'more'))} | "
            f"{pct([at(r['curve'], 10) for r in runs])} | {pct(hv20[label])} | "
            f"{versus(hv20, label, base, ('lower', 'higher'))} | {pct(served) if served else '-'} |")
    lines += ["", "Recommendation after 20 trials (`autotune recommend`) against the table's means: "
              "how often it is the best configuration, and the median shortfall", "",
              "| sampler | best for interactive | best for throughput | shortfall interactive | "
              "shortfall throughput |", "|---|---|---|---|---|"]
    for label, runs in by.items():
        cells = []
        shortfall = []
        for use in ("interactive", "throughput"):
            picks = [r["picks"][f"{use}@20"] for r in runs]
            k = sum(bool(p and p[0]) for p in picks)
            share = proportion_interval(k, len(picks))
            cells.append(f"{k}/{len(picks)} [{share.low:.0%}, {share.high:.0%}]")
            shortfall.append(pct([p[1] * 100 if p else 100.0 for p in picks]))
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {shortfall[0]} | {shortfall[1]} |")
    return "\n".join(lines)


def plot(results: list[dict], budget: int, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {}
    for r in results:
        by.setdefault(r["label"], []).append(r)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    x = np.arange(1, budget + 1)
    colours = {"tpe": "tab:blue", "tpe-startup10": "tab:cyan", "random": "tab:grey",
               "nsga2": "tab:green", "gp": "tab:purple", "grid": "tab:red"}
    for label, runs in by.items():
        family = label.removesuffix("+refs")
        curves = np.array([(r["curve"] + [r["curve"][-1]] * budget)[:budget] for r in runs]) * 100
        main = label in ("tpe", "random", "grid")
        ax.plot(x, np.median(curves, axis=0), label=label, color=colours.get(family),
                lw=2.4 if main else 1.2, ls="--" if label.endswith("+refs") else "-")
        if main:
            ax.fill_between(x, np.quantile(curves, 0.25, axis=0),
                            np.quantile(curves, 0.75, axis=0), color=colours[family], alpha=0.12)
    ax.axhline(THRESHOLD * 100, color="grey", ls="--", lw=1)
    ax.set_xlabel("trials")
    ax.set_ylabel("hypervolume, % of the table's best\n(median over seeds; bands: quartiles)")
    ax.set_title("Samplers replayed against the recorded CPU table: front of interactive E2EL vs "
                 "throughput\n(dashed: the 10 reference configurations first)", fontsize=11)
    ax.set_ylim(0, 101)
    ax.legend(ncol=2, fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=60)
    parser.add_argument("--only", default="", help="comma-separated labels of: " + ", ".join(VARIANTS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--engines", action="store_true",
                        help="a configuration vLLM resolves to a measured one's engine is a copy, "
                        "never deployed (imports vLLM once to resolve the table's configurations)")
    parser.add_argument("--out", type=Path, help="append each replay's result (JSON lines) here "
                        "and save the plot next to it")
    parser.add_argument("--summarize", type=Path, nargs="*", default=[],
                        help="replay nothing: print the table and plot of saved results")
    args = parser.parse_args(argv)
    labels = [x for x in args.only.split(",") if x] or list(VARIANTS)
    unknown = [x for x in labels if x not in VARIANTS]
    if unknown:
        parser.error(f"--only: unknown {unknown}; valid: {', '.join(VARIANTS)}")
    table, inferred = load_table(args.table)
    if args.summarize:
        results = [json.loads(line) for path in args.summarize for line in path.read_text().splitlines()]
    else:
        results = run_all(args, labels)
    served = sum(r.served for r in table.rows)
    print(f"table: {args.table} ({len(table.rows)} configurations, {served} served); "
          f"{table.header.get('protocol', '')}")
    if inferred:
        print(f"inferred: {inferred}")
    order = {label: i for i, label in enumerate(VARIANTS)}
    results.sort(key=lambda r: (order[r["label"]], r["seed"]))
    budget = max(r["budget"] for r in results)
    print(summarize(results, budget, len(table.rows), "random"))
    print("\nmedian seconds per replay: " + ", ".join(
        f"{label} {statistics.median(r['seconds'] for r in results if r['label'] == label):.1f}"
        for label in dict.fromkeys(r["label"] for r in results)))
    if args.out or args.summarize:
        png = (args.out or args.summarize[0]).with_suffix(".png")
        plot(results, budget, png)
        print(f"saved {png}")
    return 0


def run_all(args: argparse.Namespace, labels: list[str]) -> list[dict]:
    model_dir = Path(tempfile.mkdtemp(prefix="replay-model-"))
    (model_dir / "config.json").write_text((args.table.parent / "model-config.json").read_text())
    engines = engines_of(load_table(args.table)[0], model_dir) if args.engines else None
    if engines is not None:
        print(f"the {len(engines)} configurations of the table that the space draws and vLLM "
              f"accepts resolve to {len(set(engines.values()))} engines", file=sys.stderr)
    jobs = [(label, seed) for seed in range(args.first_seed, args.first_seed + args.seeds)
            for label in labels]
    jobs.sort(key=lambda job: not job[0].startswith("gp"))  # the slowest first
    results = []
    t0 = time.monotonic()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(score, label, seed, str(args.table), str(model_dir), args.budget,
                               engines) for label, seed in jobs]
        for i, f in enumerate(as_completed(futures), 1):
            results.append(f.result())
            if args.out:
                with args.out.open("a") as fh:
                    fh.write(json.dumps(results[-1]) + "\n")
            print(f"\r[{time.monotonic() - t0:5.0f} s] replay {i} of {len(jobs)}", end="",
                  file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
