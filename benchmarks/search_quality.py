"""Does the study search? Whole studies replayed with one H100's costs, against vLLM's defaults.

Issue #46's "Replay with GPU costs", the successor of `benchmarks/answer_quality.py` (whose
trial function, stop rule and scoring helpers it reuses). Each replay is a real autotune study
(`StudyRunner`, in-memory storage, the study's real time budget, its baseline, calibration,
exploration and sampler, then the real confirmation and `recommend`) whose trial function
(``H100Replay``) deploys nothing: it looks the flags up in a synthetic truth table and draws
what one deployment would measure, charging a ``DeviceClock`` what it would cost one H100.

- **The baseline** is vLLM's defaults (no tuned flag, the model's native context), as `run`
  measures it first: 1,876 ms mean E2EL at c=2 and 5,968 tok/s at c=100, the midpoints of what
  the H100 measured for them with `moe-25g` (1,848-1,904 ms, 5,933-6,002 tok/s; issue #46).
- **The truth table**: every configuration of `search_spaces/reference.yaml` at TP 1 and
  81,920 tokens over the model's native 32,768. YaRN off is rejected by vLLM (as on the H100).
  YaRN alone (vLLM's defaults at 81,920 tokens) is the baseline's equal, as the H100's 9-minute
  study found it ("#2 equivalent"). The optimization level, performance mode and expert
  parallel act as the reference study's one-change effects (`answer_quality.EFFECTS`); MTP's
  effect is the one that puts opt3-baseline where the H100 measured it (1,548 ms, 6,555 tok/s):
  x0.827 latency, x1.113 throughput (the reference study's two GPUs saw MTP cost 7% throughput
  at c=100; the H100 did not). Best: interactive 1,540 ms (-17.9%), throughput 6,673 tok/s
  (+11.8%): both uses hold a configuration >= 10% better than the baseline.
- **Costs** (issue #46, the launcher on vLLM 0.26, 2026-12-07): ready in 53 s for the study's
  first deployment (cold machine), 30 s for every later one (warm, the launcher); a rejected
  configuration 10 s of validation; a run as its requests take (the study's own stop rule,
  `answer_quality.requests_of`, warm-ups included) + 3 s; teardown 5 s. Noise as
  `answer_quality` (0.7% between deployments; per-request cv 0.7%, 11.5% with MTP).

Scored per budget, seed and use on the table's true values (`score`):

- **power**: the pick is better than the baseline by at least the smallest difference (5%);
- **quality**: the pick is within 5% of the table's best;
- **safety**: the pick is worse than the baseline beyond the noise (by more than 2%, about
  three times the spread between deployments); the goal is none;
- **spend**: configurations served, deployments, proposals vLLM rejected, and the share of
  device time spent on configurations not served before (the rest: calibration, confirmation,
  redeployments, validation of rejected ones).

    nice python benchmarks/search_quality.py --budgets 9m,30m,1h --seeds 40 --code "after (SHA)" \\
        --strategy default --out after.jsonl
    python benchmarks/search_quality.py --summarize before.jsonl after.jsonl

``--strategy``: ``default`` (what `run` does: at this code, the exploration order), ``order``,
``sampler`` (`run --exploration sampler`: TPE from the first trial after the baseline), ``refs``
(`run --seed-references`: the references after the baseline); ``--calibrate`` /
``--no-calibrate`` replay `run`'s (default: the code's own default, off since #46). The
code before issue #46 knows only ``default`` (the sampler). Shares have Wilson 95% intervals.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.deployment import failures  # noqa: E402
from autotune.core.deployment.flags import to_argv  # noqa: E402
from autotune.core.space.search_space import complete  # noqa: E402
from autotune.core.trial.outcome import Measurement, ProfileResult  # noqa: E402
from autotune.core.trial.precision import RunStop  # noqa: E402
from autotune.core.workload.profiles import ProfileOverrides, get_profile  # noqa: E402
from benchmarks import answer_quality as aq  # noqa: E402

StudyRequest, DeviceClock, confirm, prepare_study = (
    aq.StudyRequest, aq.DeviceClock, aq.confirm, aq.prepare_study)
NoFeasibleTrial, recommend = aq.NoFeasibleTrial, aq.recommend
FIELDS = {f.name for f in dataclasses.fields(StudyRequest)}
HAS_EXPLORATION = "exploration" in FIELDS  # issue #46

SPACE, REFERENCES, MODEL_CONFIG = aq.SPACE, aq.REFERENCES, aq.MODEL_CONFIG
PROFILES, USES = aq.PROFILES, aq.USES
MARGIN = 0.05  # the smallest difference (recommend's default): power and quality
NOISE = 0.02  # "beyond the noise": ~3 x the spread between GPU deployments (0.7%)
BASELINE = {"e2el_ms": 1876.0, "tput": 5968.0}  # vLLM's defaults on the H100 (midpoints)
OPT3 = {"e2el_ms": 1548.0, "tput": 6555.0}  # opt3-baseline on the H100
DEFAULTS = {"optimization_level": 2, "performance_mode": "balanced", "expert_parallel": False}
COLD_S, WARM_S = 53.0, 30.0  # ready: the study's first deployment, every later one
VALIDATION_S, RUN_OVERHEAD_S, TEARDOWN_S = 10.0, 3.0, 5.0
STRATEGIES = ("default", "order", "sampler", "refs")


def _level(params: dict) -> tuple[float, float]:
    """Latency and throughput ratios of ``params`` against vLLM's defaults, MTP aside."""
    lat = tput = 1.0
    for k, v in params.items():
        if k in DEFAULTS:
            lat *= aq.EFFECTS[(k, v)][0] / aq.EFFECTS[(k, DEFAULTS[k])][0]
            tput *= aq.EFFECTS[(k, v)][1] / aq.EFFECTS[(k, DEFAULTS[k])][1]
    return lat, tput


_OPT3_LEVEL = _level({"optimization_level": 3, "performance_mode": "throughput", "expert_parallel": True})
MTP = (OPT3["e2el_ms"] / (BASELINE["e2el_ms"] * _OPT3_LEVEL[0]),
       OPT3["tput"] / (BASELINE["tput"] * _OPT3_LEVEL[1]))


def truth_rows() -> list[dict]:
    """Every configuration of the reference space at TP 1, 81,920 tokens (module docstring)."""
    rows = []
    for opt, mode, ep, yarn, mtp in itertools.product(
            (0, 1, 2, 3), ("throughput", "balanced", "interactivity"), (False, True),
            (False, True), (False, True)):
        params = {"optimization_level": opt, "performance_mode": mode, "expert_parallel": ep,
                  "yarn": yarn, "mtp": mtp}
        lat, tput = _level(params)
        if mtp:
            lat, tput = lat * MTP[0], tput * MTP[1]
        rows.append({**params, "status": "served" if yarn else failures.CONFIG_REJECTED.name,
                     "low_e2el_ms": BASELINE["e2el_ms"] * lat, "high_output_throughput":
                     BASELINE["tput"] * tput, "per_request_cv": aq.CV[mtp]})
    return rows


BASELINE_ROW = {**DEFAULTS, "status": "served", "low_e2el_ms": BASELINE["e2el_ms"],
                "high_output_throughput": BASELINE["tput"], "per_request_cv": aq.CV[False]}


class H100Replay(aq.GpuTable):
    """``answer_quality.GpuTable`` with issue #46's costs (53 s cold, 30 s warm), vLLM's defaults
    at the native context as a row of its own, and the device time split by what it bought."""

    def __init__(self, rows: Sequence[dict], space, ctx, baseline_argv: Sequence[str],
                 seed: int, clock) -> None:
        self.rng = np.random.default_rng(seed)
        self.clock = clock
        self.rows = {}
        for row in rows:
            params = complete(space, ctx, {k: row[k] for k in aq.PARAM_NAMES})
            if all(params.get(k, row[k]) == row[k] for k in aq.PARAM_NAMES):  # not resolved away
                self.rows[tuple(to_argv(space, ctx, params))] = row
        self.rows[tuple(baseline_argv)] = BASELINE_ROW
        self.deployed: set[tuple[str, ...]] = set()
        self.deployments = self.rejected = 0
        self.new_s = self.again_s = self.rejected_s = 0.0

    def __call__(self, argv: Sequence[str], bench, setup, on_phase: Callable[[str], None]):
        row = self.rows[tuple(argv)]
        on_phase("replaying the synthetic H100 table")
        before = self.clock.now
        if row["status"] != "served":
            self.rejected += 1
            self.clock.now += VALIDATION_S
            self.rejected_s += VALIDATION_S
            return Measurement(failure=failures.failure_class(row["status"]),
                               failure_message="max_model_len 81920 > the model's 32768 (YaRN off)")
        again = tuple(argv) in self.deployed
        startup = COLD_S if self.deployments == 0 else WARM_S
        self.deployed.add(tuple(argv))
        self.deployments += 1
        results, bench_s = {}, 0.0
        for profile in bench.profiles:
            runs, stops, s = self._runs(row, profile, bench)
            results[profile.name] = ProfileResult(profile.name, tuple(runs), tuple(stops))
            bench_s += s
        self.clock.now += startup + bench_s + TEARDOWN_S
        if again:
            self.again_s += self.clock.now - before
        else:
            self.new_s += self.clock.now - before
        return Measurement(results=results, startup_s=startup, bench_s=bench_s,
                           vllm_version=aq.VLLM, hardware="1 x H100 (simulated)")

    def _runs(self, row: dict, profile, bench) -> tuple[list, list, float]:
        cv = row["per_request_cv"]
        f = math.exp(self.rng.normal(0.0, aq.DEPLOYMENT_LOG_SD))
        low = profile.name == PROFILES[0]
        true_tput = (profile.max_concurrency * profile.output_len / (row["low_e2el_ms"] / 1000)
                     if low else row["high_output_throughput"])
        runs, stops, seconds = [], [], 0.0
        for _ in range(bench.repeats):
            n, why = aq.requests_of(bench, profile, cv, profile.output_len / true_tput)
            e = math.exp(self.rng.normal(0.0, cv / math.sqrt(n)))
            if low:  # Little's law at concurrency C
                lat = row["low_e2el_ms"] * f * e
                tput = profile.max_concurrency * profile.output_len / (lat / 1000)
            else:
                tput = row["high_output_throughput"] / (f * e)
                lat = profile.max_concurrency * profile.output_len / tput * 1000
            duration = (n + profile.warmup_requests) * profile.output_len / tput
            seconds += duration + RUN_OVERHEAD_S
            runs.append({"mean_e2el_ms": lat, "output_throughput": tput,
                         "request_throughput": tput / profile.output_len,
                         "completed": float(n), "duration": duration})
            stops.append(RunStop(n, why, profile.max_concurrency, profile.max_concurrency))
        return runs, stops, seconds


def score(use: str, got: dict, best: float) -> dict:
    """One pick's true value against the baseline and the table's best (module docstring)."""
    if use == "interactive":
        gain = 1 - got["low_e2el_ms"] / BASELINE["e2el_ms"]
        short = got["low_e2el_ms"] / best - 1
    else:
        gain = got["high_output_throughput"] / BASELINE["tput"] - 1
        short = 1 - got["high_output_throughput"] / best
    return {"gain": round(gain, 5), "short_of_best": round(short, 5), "better": gain >= MARGIN,
            "within_5": short <= MARGIN, "unsafe": gain < -NOISE}


def one(code: str, strategy: str, calibrate: bool | None, seed: int, budget_s: float,
        model_dir: str) -> dict:
    with aq.as_gpu():
        return _one(code, strategy, calibrate, seed, budget_s, model_dir)


def _one(code: str, strategy: str, calibrate: bool | None, seed: int, budget_s: float,
         model_dir: str) -> dict:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rows = truth_rows()
    served_rows = [r for r in rows if r["status"] == "served"]
    best = {"interactive": min(r["low_e2el_ms"] for r in served_rows),
            "throughput": max(r["high_output_throughput"] for r in served_rows)}
    t0 = time.process_time()
    extra = {}
    if HAS_EXPLORATION and strategy in ("order", "sampler"):
        extra["exploration"] = strategy
    elif HAS_EXPLORATION and strategy == "refs":
        extra["exploration"] = "sampler"
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        plan = aq.build_plan(StudyRequest(
            workdir=Path(tmp), profiles=tuple(get_profile(p, ProfileOverrides(token_ids=True))
                                              for p in PROFILES),
            model=model_dir, space_path=str(SPACE), tp=1,
            references_path=str(REFERENCES) if strategy == "refs" else None,
            baseline="vllm-defaults", trials=aq.UNBOUNDED_TRIALS, seed=seed, study_name="replay",
            storage=f"sqlite:///{tmp}/r.db", time_budget_s=budget_s, **extra,
            **({} if calibrate is None else {"calibrate": calibrate})))
        storage = optuna.storages.InMemoryStorage()
        created, _, _ = prepare_study(plan, aq.Heartbeat(), storage)
        aq.start_clock(created, 0.0)
        clock = DeviceClock()
        trial_fn = H100Replay(rows, plan.space, plan.ctx, plan.baseline.argv, seed, clock)
        setup = aq.TrialSetup(model="", workdir=Path(tmp))
        study = aq.StudyRunner(plan, setup, trial_fn=trial_fn, storage=storage, poll_s=0.01,
                               clock=clock).work()
        search_s = clock.now
        found = [t for t in aq.outcomes(study) if t.state == "complete"]
        if plan.confirm:
            seconds, started = aq.time_budget(study)
            confirm(study, plan, setup, k=plan.confirm, trial_fn=trial_fn,
                    budget_end=None if seconds is None else started + seconds, clock=clock,
                    **aq.CONFIRM_AS_RUN)
        data = aq.study_data(study)
        truth = {aq.key(r): r for r in served_rows}
        uses = {}
        for use in USES:
            try:
                rec = recommend(data, use)
            except NoFeasibleTrial:
                uses[use] = None
                continue
            # only vLLM's defaults run at the native context, where YaRN does not apply
            is_base = "yarn" not in rec.trial.params
            got = BASELINE_ROW if is_base else truth[aq.key(rec.trial.params)]
            uses[use] = {"pick": "baseline" if is_base else aq.key(rec.trial.params),
                         **score(use, got, best[use]), "vs_baseline": aq.vs_baseline(rec)}
    return {"code": code, "strategy": strategy, "calibrate": plan.request.calibrate, "seed": seed,
            "budget_s": budget_s, "proposals": len(found), "rejected": trial_fn.rejected,
            "served": len(trial_fn.deployed), "deployments": trial_fn.deployments,
            "new_s": round(trial_fn.new_s, 1), "again_s": round(trial_fn.again_s, 1),
            "rejected_s": round(trial_fn.rejected_s, 1), "search_s": round(search_s, 1),
            "device_s": round(clock.now, 1), "uses": uses,
            "cpu_s": round(time.process_time() - t0, 2)}


def summarize(results: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        label = r["strategy"] + ("" if r["calibrate"] else "+nocal")
        groups.setdefault((r["budget_s"], r["code"], label), []).append(r)
    lines = ["| budget | code | strategy | seeds | use | power: better than baseline by >= 5% | "
             "quality: within 5% of best | safety: worse than baseline by > 2% | served "
             "(median) | deployments (median) | rejected / proposals | device time on new "
             "configurations | device min (median) |", "|---" * 13 + "|"]
    for (budget, code, label), runs in sorted(groups.items()):
        served = statistics.median(r["served"] for r in runs)
        deployments = statistics.median(r["deployments"] for r in runs)
        rejected = f"{sum(r['rejected'] for r in runs)}/{sum(r['proposals'] for r in runs)}"
        spent = sum(r["new_s"] + r["again_s"] + r["rejected_s"] for r in runs)
        new = f"{sum(r['new_s'] for r in runs) / spent:.0%}" if spent else "-"
        minutes = statistics.median(r["device_s"] for r in runs) / 60
        for use in USES:
            got = [r["uses"].get(use) or {} for r in runs]
            lines.append(
                f"| {aq.budget_text(budget)} | {code} | {label} | {len(runs)} | {use} | "
                f"{aq.share([bool(g.get('better')) for g in got])} | "
                f"{aq.share([bool(g.get('within_5')) for g in got])} | "
                f"{aq.share([bool(g.get('unsafe')) for g in got])} | {served:g} | "
                f"{deployments:g} | {rejected} | {new} | {minutes:.1f} |")
    lines += ["", "Shares over seeds with Wilson 95% intervals; a seed without a pick counts as "
              "neither better nor within 5%. Baseline: vLLM's defaults (1,876 ms, 5,968 tok/s)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="9m,30m,1h")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--strategy", default="default",
                    help=f"comma-separated, of {', '.join(STRATEGIES)}")
    ap.add_argument("--calibrate", action=argparse.BooleanOptionalAction, default=None,
                    help="as `run --calibrate` / `--no-calibrate` (default: the code's own default)")
    ap.add_argument("--code", default="", help="what code ran (saved in every record)")
    ap.add_argument("--out", type=Path, help="append the runs here (JSON lines)")
    ap.add_argument("--summarize", type=Path, nargs="*", help="replay nothing: print these files")
    args = ap.parse_args(argv)
    if args.summarize:
        missing = [str(p) for p in args.summarize if not p.is_file()]
        if missing:
            ap.error(f"--summarize: no such file {', '.join(missing)}")
        print(summarize([json.loads(line) for p in args.summarize
                         for line in p.read_text().splitlines() if line]))
        return 0
    budgets = [aq.parse_budget(b) for b in args.budgets.split(",")]
    strategies = args.strategy.split(",")
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad or (not HAS_EXPLORATION and strategies != ["default"]):
        ap.error(f"--strategy {args.strategy}: valid: "
                 f"{', '.join(STRATEGIES) if HAS_EXPLORATION else 'default (this code has no other)'}")
    model_dir = Path(tempfile.mkdtemp(prefix="replay-model-"))
    (model_dir / "config.json").write_text(MODEL_CONFIG.read_text())
    jobs = [(s, seed, b) for s in strategies
            for seed in range(args.first_seed, args.first_seed + args.seeds) for b in budgets]
    random.Random(0).shuffle(jobs)
    results, t0 = [], time.monotonic()
    with ProcessPoolExecutor(max(1, min(args.jobs, 2))) as pool:
        futures = [pool.submit(one, args.code, s, args.calibrate, seed, b, str(model_dir))
                   for s, seed, b in jobs]
        for i, f in enumerate(as_completed(futures), 1):
            results.append(f.result())
            if args.out:
                with args.out.open("a") as fh:
                    fh.write(json.dumps(results[-1]) + "\n")
            print(f"\r[{time.monotonic() - t0:5.0f} s] replay {i} of {len(jobs)}", end="",
                  file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(summarize(results))
    print(f"median CPU seconds per replay: {statistics.median(r['cpu_s'] for r in results):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
