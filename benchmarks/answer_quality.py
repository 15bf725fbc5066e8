"""Is the answer right? Whole studies replayed on a synthetic GPU table with GPU costs.

The successor of `benchmarks/time_to_answer.py` for issue #40's "Replay with GPU costs". Each
replay is a real autotune study (`StudyRunner`, in-memory storage, the study's real time budget,
its real confirmation and `recommend`) whose trial function (``GpuTable``, below) deploys
nothing: it looks a configuration up in a synthetic GPU truth table and draws what one
deployment of it would measure, and it charges a ``DeviceClock`` what that deployment would
cost one H100. The costs are the stored GPU studies' (docs/gpu.md,
/work/shared/notes/vllm-on-gpu.md, 2026-12-05/06, moe-25g on one H100/H200):

- ready: 90 s for a configuration's first deployment, 70 s when it is deployed again (the
  compile cache hits: 71 s second start), a configuration vLLM rejects: 10 s of validation;
- a run: its requests x output tokens / the configuration's true output throughput (warm-up
  requests included), plus 3 s of client start per run; teardown 5 s. A non-MTP trial then
  costs ~120 s (10 precise requests at c=2), an MTP trial ~190-215 s (its per-request E2EL
  varies by 11.5%, so its run goes to the 100-request ceiling), a redeployment ~100 s;
- how many requests a run sends is the study's own stop rule (``bench.pinned``, the seam a
  real trial's client asks), applied to the per-request variation: t(n-1) x cv / sqrt(n)
  against the rule's target, asked where the rule asks (whole waves, at least its floor);
- noise: each deployment draws a factor exp(N(0, 0.007)) per profile (the measured spread
  between GPU deployments, 0.6-0.8%), each run a factor exp(N(0, cv / sqrt(n))) with cv the
  per-request E2EL variation (0.7% without MTP: 0.3-1.1% measured; 11.5% with MTP: 9-14%).
  Latency is multiplied by them, throughput divided (Little's law at a fixed concurrency).

The truth table (``benchmarks/data/gpu-synthetic/table.csv``, written by ``--write-table``) is
log-additive in the reference study's measured one-change effects (/work/shared/reference/
seed-study.md, two GPUs, vLLM 0.32), anchored at what one H100 measured for opt3-baseline with
moe-25g (1,548 ms, 6,555 tok/s; issue #40). docs/answers.md says how each effect is read.

Per budget, seed and use (interactive: low-concurrency mean E2EL; throughput: high-concurrency
output throughput), on the table's true values: whether the pick is within 5% of the table's
best; whether it is worse than the baseline (opt3-baseline, what the practitioner ran) by more
than the smallest difference (5%); whether the use ended decided or equivalent, in the code's
own words (after: no rival and no baseline comparison undecided; before c5a51e0, which had no
"equivalent": no rival tied with the pick). Shares get Wilson 95% intervals; trials served and
device minutes, medians.

    python benchmarks/answer_quality.py --write-table      # (re)write the truth table
    python benchmarks/answer_quality.py --budgets 9m,30m,1h --seeds 30 --code "after (SHA)" \\
        --out after.jsonl
    python benchmarks/answer_quality.py --summarize before.jsonl after.jsonl

The script imports autotune through ``_compat`` (the module layout after #48's moves, else the
one after #42 step 4, else the flat ``autotune.study.*`` of c5a51e0), so the same file runs in a
worktree at any of those commits.
``--variant``: ``refs`` (default; the ten references enqueued first, opt3-baseline the study's
baseline) or ``space`` (the default space alone, as the 9-minute GPU study of issue #40 ran; a
study without a measured baseline); ``+nocal`` after either (``refs+nocal``) runs it without the
calibration redeployment of the baseline (``run --no-calibrate``), to show what it buys.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _compat(paths: tuple[str, ...], *names: str) -> tuple:
    """``names`` from the first module of ``paths`` this checkout has (newest layout first)."""
    for path in paths[:-1]:
        try:
            module = importlib.import_module(path)
            break
        except ModuleNotFoundError:
            continue
    else:
        module = importlib.import_module(paths[-1])
    return tuple(getattr(module, n) for n in names)


from autotune.core.deployment import failures  # noqa: E402
from autotune.core.deployment.flags import to_argv  # noqa: E402
from autotune.core.maths.stats import t_quantile  # noqa: E402
from autotune.core.space.search_space import complete, params_key  # noqa: E402
from autotune.core.trial.outcome import Measurement, ProfileResult  # noqa: E402
from autotune.core.trial.precision import RunStop  # noqa: E402
from autotune.core.workload.profiles import ProfileOverrides, get_profile  # noqa: E402
from benchmarks.seed_stats import proportion_interval  # noqa: E402

NoFeasibleTrial, recommend = _compat(
    ("autotune.core.analysis.recommendation", "autotune.core.analysis.recommend"),
    "NoFeasibleTrial", "recommend")
try:  # the study's request record: StudyRequest since #48, PlanRequest before
    (StudyRequest,) = _compat(("autotune.core.plan.study_request",), "StudyRequest")
except ModuleNotFoundError:
    (StudyRequest,) = _compat(("autotune.core.plan.request", "autotune.core.analysis.stored_plan"),
                              "PlanRequest")
(DeviceClock,) = _compat(("autotune.study.dev.replay", "autotune.study.replay"), "DeviceClock")
(confirm,) = _compat(("autotune.study.run.confirm_rounds", "autotune.study.confirm"), "confirm")
# As `run` confirms since #46: only finalists whose verdict is still in question (older code: all).
CONFIRM_AS_RUN = {"only_open": True} if "only_open" in inspect.signature(confirm).parameters else {}
(prepare_study,) = _compat(("autotune.study.run.study_setup", "autotune.study.run.creation",
                            "autotune.study.creation"), "prepare_study")
(TrialSetup,) = _compat(("autotune.study.run.trial_function", "autotune.study.run.one_trial",
                         "autotune.study.trial"), "TrialSetup")
(build_plan,) = _compat(("autotune.study.run.study_plan", "autotune.study.run.planning",
                         "autotune.study.plans"), "build_plan")
(StudyRunner,) = _compat(("autotune.study.run.runner", "autotune.study.runner"), "StudyRunner")
outcomes, study_data = _compat(("autotune.study.store.records", "autotune.study.records"),
                               "outcomes", "study_data")
(Heartbeat,) = _compat(("autotune.study.store.storage", "autotune.study.storage"), "Heartbeat")
start_clock, time_budget = _compat(("autotune.study.store.state", "autotune.study.state"),
                                   "start_clock", "time_budget")

DATA = ROOT / "benchmarks" / "data" / "gpu-synthetic"
TABLE = DATA / "table.csv"
SPACE = ROOT / "search_spaces" / "reference.yaml"
REFERENCES = ROOT / "search_spaces" / "references.yaml"
MODEL_CONFIG = ROOT / "benchmarks" / "data" / "cpu-table" / "model-config.json"  # native 32768, MoE, MTP
PROFILES = ("low-concurrency", "high-concurrency")
BASELINE = "opt3-baseline"
USES = ("interactive", "throughput")
MARGIN = 0.05  # the smallest difference worth caring about (recommend's default)
UNBOUNDED_TRIALS = 10_000  # a time budget decides the count

# Costs (docs/gpu.md, vllm-on-gpu.md 2026-12-05/06, one H100/H200, moe-25g).
READY_S, READY_AGAIN_S = 90.0, 70.0
VALIDATION_S = 10.0
RUN_OVERHEAD_S = 3.0
TEARDOWN_S = 5.0
# Noise: the spread between deployments, and per-request E2EL variation.
DEPLOYMENT_LOG_SD = 0.007
CV = {False: 0.007, True: 0.115}  # by MTP
VLLM = "vllm 0.26.0"  # what the study reads its platform from (gpu)

# ------------------------------------------------------------------------- the truth table

# The reference study's one-change effects against opt3-baseline (seed-study.md), as ratios
# of the low-concurrency mean E2EL and the high-concurrency output throughput.
ANCHOR = {"e2el_ms": 1548.0, "tput": 6555.0}  # opt3-baseline on one H100 (issue #40)
EFFECTS: dict[tuple[str, object], tuple[float, float]] = {
    ("optimization_level", 0): (11796.860 / 1930.785, 1377.060 / 1663.330),
    ("optimization_level", 1): (2724.515 / 1930.785, 6.523 / 6.497),  # req/s where no tok/s
    ("optimization_level", 2): (1945.348 / 1930.785, 6.581 / 6.497),
    ("optimization_level", 3): (1.0, 1.0),
    ("performance_mode", "throughput"): (1.0, 1.0),
    ("performance_mode", "balanced"): (1.0, 1.005),  # "within ~1%" / "slightly better"
    ("performance_mode", "interactivity"): (1.0, 1.005),
    ("expert_parallel", True): (1.0, 1.0),
    ("expert_parallel", False): (0.995, 0.995),  # "slightly better" / "slightly worse"
    ("mtp", True): (1.0, 1.0),
    ("mtp", False): (2505.243 / 1930.785, 1785.471 / 1663.330),
}
BASELINE_PARAMS = {"optimization_level": 3, "performance_mode": "throughput",
                   "expert_parallel": True, "yarn": True, "mtp": True}


def truth_rows() -> list[dict]:
    """Every configuration of the reference space on one GPU (TP 1, max model len 81920 over a
    native 32768): YaRN off is rejected by vLLM; the rest are served at the log-additive truth."""
    rows = []
    for opt, mode, ep, yarn, mtp in itertools.product(
            (0, 1, 2, 3), ("throughput", "balanced", "interactivity"), (False, True),
            (False, True), (False, True)):
        params = {"optimization_level": opt, "performance_mode": mode, "expert_parallel": ep,
                  "yarn": yarn, "mtp": mtp}
        lat, tput = ANCHOR["e2el_ms"], ANCHOR["tput"]
        for k, v in params.items():
            if k != "yarn":
                lat *= EFFECTS[(k, v)][0]
                tput *= EFFECTS[(k, v)][1]
        rows.append({**params, "status": "served" if yarn else failures.CONFIG_REJECTED.name,
                     "low_e2el_ms": round(lat, 2) if yarn else "",
                     "high_output_throughput": round(tput, 1) if yarn else "",
                     "per_request_cv": CV[mtp] if yarn else ""})
    return rows


def write_table(path: Path = TABLE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = truth_rows()
    head = list(rows[0])
    lines = ["# synthetic GPU truth table (benchmarks/answer_quality.py --write-table; docs/answers.md)",
             "# log-additive in the reference study's one-change effects, anchored at opt3-baseline "
             "1548 ms / 6555 tok/s (H100, moe-25g); YaRN off is rejected at 81920 > native 32768",
             ",".join(head)]
    lines += [",".join(str(r[k]).lower() if isinstance(r[k], bool) else str(r[k]) for k in head)
              for r in rows]
    path.write_text("\n".join(lines) + "\n")


def read_table(path: Path = TABLE) -> list[dict]:
    text = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    head = text[0].split(",")
    out = []
    for line in text[1:]:
        raw = dict(zip(head, line.split(","), strict=True))
        out.append({"optimization_level": int(raw["optimization_level"]),
                    "performance_mode": raw["performance_mode"],
                    "expert_parallel": raw["expert_parallel"] == "true",
                    "yarn": raw["yarn"] == "true", "mtp": raw["mtp"] == "true",
                    "status": raw["status"],
                    "low_e2el_ms": float(raw["low_e2el_ms"] or "nan"),
                    "high_output_throughput": float(raw["high_output_throughput"] or "nan"),
                    "per_request_cv": float(raw["per_request_cv"] or "nan")})
    return out


PARAM_NAMES = ("optimization_level", "performance_mode", "expert_parallel", "yarn", "mtp")


def key(params: Mapping[str, object]) -> str:
    return params_key({k: params[k] for k in PARAM_NAMES if k in params})


# ------------------------------------------------------------------------- the trial function


def requests_of(bench, profile, cv: float, request_s: float) -> tuple[int, str]:
    """How many requests a run of ``profile`` sends under the study's own stop rule
    (``bench.pinned``), with per-request variation ``cv`` and ``request_s`` device seconds a
    request: the time budget's share of the trial (``max_run_s``) first, then the precision
    length (``enough_rel``), then the balanced rule at the first count it asks at that reaches n*
    (docs/precision.md); the target rule (``--precision``, and the code before the balance)
    at the first whose t-interval of the mean is within its target; else the ceiling."""
    ceiling = profile.num_prompts
    pinned = getattr(bench, "pinned", {}).get(profile.name)
    if pinned is None:
        return ceiling, "ceiling"
    rule, c = pinned.rule, profile.max_concurrency
    balance = getattr(rule, "balance", None)
    for n in range(2, ceiling):
        if not rule.asks(n, c, ceiling):
            continue
        cap = getattr(pinned, "max_run_s", None)  # the time budget's share of a trial's runs
        if cap is not None and n * request_s >= cap:
            return n, "time budget"
        enough = getattr(rule, "enough_rel", None)  # small next to the smallest difference
        if balance is not None and enough is not None and t_quantile(n - 1) * cv / math.sqrt(n) <= enough:
            return n, "precise"
        if balance is not None and n >= balance.requests(cv, request_s):
            return n, "balanced"
        if balance is None and t_quantile(n - 1) * cv / math.sqrt(n) <= rule.target_rel:
            return n, "precise"
    return ceiling, "ceiling"


class GpuTable:
    """A trial function (the runner's ``trial_fn`` seam) over the truth table: a rejected
    configuration costs its validation; a served one draws a deployment factor per profile and
    a factor per run, and costs its start-up (warm when deployed before), its runs and a
    teardown on ``clock``."""

    def __init__(self, rows: Sequence[dict], space, ctx, seed: int, clock) -> None:
        self.rng = np.random.default_rng(seed)
        self.clock = clock
        self.rows = {}
        for row in rows:
            params = complete(space, ctx, {k: row[k] for k in PARAM_NAMES})
            if all(params.get(k, row[k]) == row[k] for k in PARAM_NAMES):  # not fixed away (YaRN)
                self.rows[tuple(to_argv(space, ctx, params))] = row
        self.deployed: set[tuple[str, ...]] = set()
        self.deployments = 0

    def __call__(self, argv: Sequence[str], bench, setup, on_phase: Callable[[str], None]):
        row = self.rows[tuple(argv)]
        on_phase("replaying the synthetic GPU table")
        if row["status"] != "served":
            self.clock.now += VALIDATION_S
            return Measurement(failure=failures.failure_class(row["status"]),
                               failure_message="max_model_len 81920 > the model's 32768 (YaRN off)")
        again = tuple(argv) in self.deployed
        self.deployed.add(tuple(argv))
        self.deployments += 1
        startup = READY_AGAIN_S if again else READY_S
        cv = row["per_request_cv"]
        results, bench_s = {}, 0.0
        for profile in bench.profiles:
            f = math.exp(self.rng.normal(0.0, DEPLOYMENT_LOG_SD))
            runs, stops = [], []
            low = profile.name == PROFILES[0]
            true_tput = (profile.max_concurrency * profile.output_len / (row["low_e2el_ms"] / 1000)
                         if low else row["high_output_throughput"])
            for _ in range(bench.repeats):
                n, why = requests_of(bench, profile, cv, profile.output_len / true_tput)
                e = math.exp(self.rng.normal(0.0, cv / math.sqrt(n)))
                if low:  # Little's law at concurrency C
                    lat = row["low_e2el_ms"] * f * e
                    tput = profile.max_concurrency * profile.output_len / (lat / 1000)
                else:
                    tput = row["high_output_throughput"] / (f * e)
                    lat = profile.max_concurrency * profile.output_len / tput * 1000
                duration = (n + profile.warmup_requests) * profile.output_len / tput
                bench_s += duration + RUN_OVERHEAD_S
                runs.append({"mean_e2el_ms": lat, "output_throughput": tput,
                             "request_throughput": tput / profile.output_len,
                             "completed": float(n), "duration": duration})
                stops.append(RunStop(n, why, profile.max_concurrency, profile.max_concurrency))
            results[profile.name] = ProfileResult(profile.name, tuple(runs), tuple(stops))
        self.clock.now += startup + bench_s + TEARDOWN_S
        return Measurement(results=results, startup_s=startup, bench_s=bench_s,
                           vllm_version=VLLM, hardware="1 x H100 (simulated)")


# ------------------------------------------------------------------------- one replay


@contextlib.contextmanager
def as_gpu() -> Iterator[None]:
    """The space's ``when: {platform: gpu}`` (expert parallel) as on a GPU machine: the study
    asks ``shell.server.install.detect_platform``, a stand-in for the machine here, not for anything
    measured; restored on leaving."""
    import autotune.shell.server.install as install

    real = install.detect_platform
    install.detect_platform = lambda: "gpu"
    try:
        yield
    finally:
        install.detect_platform = real


BASELINE_NAME = "opt3-baseline"
HAS_BASELINE = "baseline" in {f.name for f in dataclasses.fields(StudyRequest)}  # not at c5a51e0


def one(code: str, variant: str, seed: int, budget_s: float, model_dir: str, table: str) -> dict:
    """One study of ``variant`` at ``budget_s`` device seconds, scored on the truth table."""
    with as_gpu():
        return _one(code, variant, seed, budget_s, model_dir, table)


def _one(code: str, variant: str, seed: int, budget_s: float, model_dir: str, table: str) -> dict:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rows = read_table(Path(table))
    truth = {key(r): r for r in rows if r["status"] == "served"}
    best = {"interactive": min(r["low_e2el_ms"] for r in truth.values()),
            "throughput": max(r["high_output_throughput"] for r in truth.values())}
    base = truth[key(BASELINE_PARAMS)]
    t0 = time.process_time()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        plan = build_plan(StudyRequest(
            workdir=Path(tmp), profiles=tuple(get_profile(p, ProfileOverrides(token_ids=True)) for p in PROFILES),
            model=model_dir, space_path=str(SPACE), tp=1,
            references_path=str(REFERENCES) if variant.startswith("refs") else None,
            # as `run --seed-references --baseline opt3-baseline`: measured first, calibrated
            **({"baseline": BASELINE_NAME} if variant.startswith("refs") and HAS_BASELINE else {}),
            trials=UNBOUNDED_TRIALS, seed=seed, study_name="replay",
            **({"calibrate": False} if variant.endswith("+nocal") else {}),
            storage=f"sqlite:///{tmp}/r.db", time_budget_s=budget_s))
        storage = optuna.storages.InMemoryStorage()
        created, _, _ = prepare_study(plan, Heartbeat(), storage)
        start_clock(created, 0.0)  # the budget counts device seconds from the clock's 0
        clock = DeviceClock()
        trial_fn = GpuTable(rows, plan.space, plan.ctx, seed, clock)
        setup = TrialSetup(model="", workdir=Path(tmp))
        study = StudyRunner(plan, setup, trial_fn=trial_fn, storage=storage, poll_s=0.01,
                            clock=clock).work()
        search_s = clock.now
        found = [t for t in outcomes(study) if t.state == "complete"]
        served = sum(t.failure is None for t in found)
        if plan.confirm:  # as `run` confirms: inside what is left of the study's budget
            seconds, started = time_budget(study)
            confirm(study, plan, setup, k=plan.confirm, trial_fn=trial_fn,
                    budget_end=None if seconds is None else started + seconds, clock=clock,
                    **CONFIRM_AS_RUN)
        data = study_data(study)
        uses = {}
        for use in USES:
            try:
                rec = recommend(data, use)
            except NoFeasibleTrial:
                uses[use] = None
                continue
            got = truth[key(rec.trial.params)]
            if use == "interactive":
                short = got["low_e2el_ms"] / best[use] - 1
                worse = got["low_e2el_ms"] / base["low_e2el_ms"] - 1 > MARGIN
            else:
                short = 1 - got["high_output_throughput"] / best[use]
                worse = 1 - got["high_output_throughput"] / base["high_output_throughput"] > MARGIN
            uses[use] = {"pick": key(rec.trial.params), "short_of_best": round(short, 5),
                         "within_5": short <= MARGIN, "worse_than_baseline": worse,
                         "decided": decided(rec), "vs_baseline": vs_baseline(rec)}
    return {"code": code, "variant": variant, "seed": seed, "budget_s": budget_s,
            "trials": len(found), "served": served, "deployments": trial_fn.deployments,
            "search_s": round(search_s, 1), "device_s": round(clock.now, 1),
            "baseline_measured": data.baseline is not None, "uses": uses,
            "cpu_s": round(time.process_time() - t0, 2)}


def decided(rec) -> bool:
    """Decided or equivalent, in the code's own words: no rival (nor the baseline) undecided
    against the pick; before the verdicts (c5a51e0), no rival tied with it."""
    if not hasattr(rec, "versus"):
        return not rec.tied
    versus = rec.versus
    return not rec.tied and (versus is None or versus.verdict.value != "undecided")


def vs_baseline(rec) -> str:
    """The pick against the baseline as the code says it ('' where it cannot)."""
    versus = getattr(rec, "versus", None)
    if versus is None:
        return ""
    return "keep" if versus.same else versus.verdict.value


# ------------------------------------------------------------------------- summaries


def share(flags: Sequence[bool]) -> str:
    """'k/n p% [low, high]' with the Wilson 95% interval (``seed_stats.proportion_interval``)."""
    k, n = sum(flags), len(flags)
    if not n:
        return "-"
    got = proportion_interval(k, n)
    return f"{k}/{n} {got.value:.0%} [{max(got.low, 0):.0%}, {min(got.high, 1):.0%}]"


def budget_text(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def summarize(results: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["budget_s"], r["variant"], r["code"]), []).append(r)
    lines = ["| budget | variant | code | seeds | use | pick within 5% of best | worse than "
             "baseline by > 5% | decided or equivalent | trials served (median) | device "
             "min (median) |", "|---" * 10 + "|"]
    for (budget, variant, code), runs in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1])):
        served = statistics.median(r["served"] for r in runs)
        minutes = statistics.median(r["device_s"] for r in runs) / 60
        for use in USES:
            got = [r["uses"].get(use) for r in runs]
            picked = [g for g in got if g]
            lines.append(
                f"| {budget_text(budget)} | {variant} | {code} | {len(runs)} | {use} | "
                f"{share([bool(g and g['within_5']) for g in got])} | "
                f"{share([bool(g and g['worse_than_baseline']) for g in got])} | "
                f"{share([bool(g and g['decided']) for g in got])} | {served:g} | {minutes:.1f} |"
                + ("" if len(picked) == len(got) else f" ({len(got) - len(picked)} without a pick)"))
    lines += ["", "Shares over seeds, Wilson 95% intervals; a seed without a pick counts as "
              "neither within 5% nor decided. 'worse than baseline': the pick's true value worse "
              f"than {BASELINE}'s by more than the smallest difference (5%)."]
    return "\n".join(lines)


def parse_budget(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        return float(text[:-1]) * units[text[-1]]
    except (KeyError, ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"{text!r}: a budget is a number with s, m or h "
                                         "(9m, 30m, 1h)") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="9m,30m,1h")
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--variant", default="refs", help="refs (references first, opt3-baseline "
                    "the baseline) or space (the default space alone)")
    ap.add_argument("--code", default="", help="what code ran (saved in every record)")
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--out", type=Path, help="append the runs here (JSON lines)")
    ap.add_argument("--write-table", action="store_true", help="write the truth table and stop")
    ap.add_argument("--summarize", type=Path, nargs="*", help="replay nothing: print these files")
    args = ap.parse_args(argv)
    if args.write_table:
        write_table(args.table)
        print(f"wrote {args.table}")
        return 0
    if args.summarize:
        missing = [str(p) for p in args.summarize if not p.is_file()]
        if missing:
            ap.error(f"--summarize: no such file {', '.join(missing)}")
        print(summarize([json.loads(line) for p in args.summarize
                         for line in p.read_text().splitlines() if line]))
        return 0
    budgets = [parse_budget(b) for b in args.budgets.split(",")]
    if args.variant.removesuffix("+nocal") not in ("refs", "space"):
        ap.error(f"--variant {args.variant}: valid: refs, space, refs+nocal, space+nocal")
    if not args.table.is_file():
        ap.error(f"--table {args.table}: no such file (write it with --write-table)")
    model_dir = Path(tempfile.mkdtemp(prefix="replay-model-"))
    (model_dir / "config.json").write_text(MODEL_CONFIG.read_text())
    jobs = [(seed, b) for seed in range(args.first_seed, args.first_seed + args.seeds)
            for b in budgets]
    random.Random(0).shuffle(jobs)
    results, t0 = [], time.monotonic()
    with ProcessPoolExecutor(min(args.jobs, 2)) as pool:
        futures = [pool.submit(one, args.code, args.variant, seed, b, str(model_dir),
                               str(args.table)) for seed, b in jobs]
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
