"""How many load probes it takes to find a capacity boundary: autotune's search against the
approaches of other tools, on one real deployment.

Deploys the generated MoE+MTP model once (CPU build, TP=1 on core 0: the client and API server
keep core 1), then, in ``--rounds`` interleaved rounds, finds the highest max concurrency at
which ``--slo`` holds with:

- autotune: bracket and bisect on a log scale, loads near the limit measured again
  (``core.trial.capacity_search``), within [--low, --high];
- linear descent, as vLLM's ``benchmarks/auto_tune/auto_tune.sh`` lowers the request rate:
  from --high down by 1 until one run meets the SLO;
- uniform scan, as ``vllm bench sweep`` runs a list of loads and the user reads the limit off
  the plot: every --scan-step from --scan-step to --high, the highest load that met the SLO.

Every probe is the same measured run (the profile at that load, at least 2 requests per
concurrent slot). Prints per round and method: probes, seconds, the load met and the load missed.

    .venv/bin/python benchmarks/experiments/capacity_search.py [--slo 'p99_tpot_ms<=10'] [--rounds 2]

``--synthetic`` deploys nothing: it replays a capacity study (one search per configuration,
then ``CONFIRM_ROUNDS`` redeployments) on synthetic per-request latencies, before (every probe
runs all its requests, every redeployment searches again) and after (a probe stops once its
fail is settled, a redeployment re-probes the boundary), and prints probes, requests (warm-up
included), the modelled minutes, and how many boundaries after equal those before.

    .venv/bin/python benchmarks/experiments/capacity_search.py --synthetic [--configs 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import Slot
from autotune.core.metrics.slo import parse_limit
from autotune.core.metrics.summary import RequestResult, flat_metrics, summarize
from autotune.core.trial.capacity_search import Boundary, Probe, goodput_limits, search
from autotune.core.trial.early_fail import SettleRule
from autotune.core.workload.capacity_spec import CapacitySpec
from autotune.core.workload.profiles import get_profile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.checkpoints import make_model
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.server.server import DeploymentSpec, ServerProcess
from autotune.study.run.confirm_rounds import CONFIRM_ROUNDS

Measure = Callable[[float, str, SettleRule | None], Probe]


def linear_descent(spec: CapacitySpec, measure: Measure) -> tuple[float | None, float | None, int]:
    probes, load, missed = 0, spec.high, None
    while load >= spec.low:
        probes += 1
        if all(lim.margin(measure(load, "linear", None).metrics[lim.metric]) <= 0
               for lim in spec.limits):
            return load, missed, probes
        missed, load = load, load - 1
    return None, missed, probes


def uniform_scan(spec: CapacitySpec, measure: Measure, step: int) -> tuple[float | None, float | None, int]:
    met, missed, probes = None, None, 0
    for load in range(step, int(spec.high) + 1, step):
        probes += 1
        if all(lim.margin(measure(float(load), "scan", None).metrics[lim.metric]) <= 0
               for lim in spec.limits):
            met = float(load) if missed is None else met
        elif missed is None:
            missed = float(load)
    return met, missed, probes


class SyntheticDeployment:
    """One deployment whose requests at concurrency c have log-normal TPOT and TTFT around
    medians that grow as 1 + (c / knee)**2 (a server saturating at about ``knee``). A probe
    runs in waves of c requests, each wave as long as a request; asked after each completion,
    a settle rule that says "settled" ends the run (the client cancels those in flight) at the
    end of that wave. Requests at one load and repeat are the same draws whatever the method,
    so verdicts compare."""

    TPOT_MS, TTFT_MS, OUTPUT_LEN = 60.0, 300.0, 256

    def __init__(self, profile, knee: float, seed: tuple[int, ...], cut: bool) -> None:
        self.profile, self.knee, self.seed, self.cut = profile, knee, seed, cut
        self.requests = self.probes = 0
        self.seconds = 0.0
        self.seen: dict[float, int] = {}

    def measure(self, load: float, why: str, settle: SettleRule | None) -> Probe:
        at = self.profile.at_load(load)
        c, planned = int(load), at.num_prompts
        nth = self.seen[load] = self.seen.get(load, 0) + 1
        rng = np.random.default_rng([*self.seed, int(load), nth])
        grow = 1 + (load / self.knee) ** 2
        tpot = self.TPOT_MS * grow * np.exp(rng.normal(0, 0.3, planned)) / 1000
        ttft = self.TTFT_MS * grow * np.exp(rng.normal(0, 0.5, planned)) / 1000
        results = [RequestResult(prompt_len=at.input_len, start_s=0.0, success=True,
                                 output_tokens=self.OUTPUT_LEN, ttft_s=float(f),
                                 latency_s=float(f + t * (self.OUTPUT_LEN - 1)))
                   for f, t in zip(ttft, tpot, strict=True)]
        measured, why_settled = planned, ""
        if self.cut and settle is not None:
            k = next((k for k in range(1, planned + 1) if settle.settled(results[:k], planned)), 0)
            if k:
                measured, why_settled = k, settle.settled(results[:k], planned)
        wave_s = (self.TTFT_MS + self.TPOT_MS * (self.OUTPUT_LEN - 1)) * grow / 1000
        run_s = math.ceil(measured / c) * wave_s
        self.seconds += math.ceil(at.warmups / c) * wave_s + run_s
        self.requests += at.warmups + measured
        self.probes += 1
        return Probe(load, flat_metrics(summarize(results[:measured], run_s)), measured, planned,
                     why_settled)


def synthetic(args: argparse.Namespace, console: Console) -> None:
    spec = CapacitySpec(low=1, high=256, limits=tuple(
        parse_limit(text, f"--slo {text!r}") for text in args.slos))
    profile = dataclasses.replace(get_profile("capacity"), capacity=spec)
    rng = np.random.default_rng(args.seed)
    # Per configuration: (phase, method) -> [probes, requests, minutes].
    costs = np.zeros((args.configs, 2, 2, 3))  # config, phase (search, confirmation), method
    same = {"search": [0, 0, 0], "confirmation": [0, 0, 0]}  # exact, within resolution, of

    def close(a: Boundary, b: Boundary) -> bool:
        if a.load is None or b.load is None:
            return a.load == b.load
        return abs(math.log(a.load / b.load)) <= math.log(spec.resolution) + 1e-9 or \
            abs(a.load - b.load) <= 1

    for i in range(args.configs):
        knee = float(np.exp(rng.uniform(math.log(2), math.log(100))))
        # Deployment-to-deployment spread of the saturation point: log-sd args.spread.
        knees = [knee] + [knee * float(np.exp(rng.normal(0, args.spread)))
                          for _ in range(CONFIRM_ROUNDS)]
        found: dict[str, Boundary] = {}
        for d, k in enumerate(knees):
            phase = "search" if d == 0 else "confirmation"
            ends = {}
            for method in ("before", "after"):
                dep = SyntheticDeployment(profile, k, (args.seed, i, d), cut=method == "after")
                around = found.get(method) if phase == "confirmation" and method == "after" else None
                b = search("capacity", spec, dep.measure, None, around).boundary
                if d == 0:
                    found[method] = b
                ends[method] = b
                costs[i, int(d > 0), int(method == "after")] += (dep.probes, dep.requests, dep.seconds / 60)
            a, b = ends["before"], ends["after"]
            same[phase][0] += (a.load, a.fail_load) == (b.load, b.fail_load)
            same[phase][1] += close(a, b)
            same[phase][2] += 1
    table = Table(title=f"capacity study replay: {args.configs} configurations, "
                        f"{' and '.join(args.slos)}, 1 search + {CONFIRM_ROUNDS} redeployments "
                        f"each (knee log-uniform in [2, 100], spread {args.spread:g})")
    for col in ("phase", "method", "probes", "requests", "minutes (model)", "same boundary",
                "within resolution"):
        table.add_column(col, justify="left" if col in ("phase", "method") else "right")
    boot = rng.integers(0, args.configs, (2000, args.configs))  # configurations resampled

    def ratio(c: np.ndarray) -> str:
        """after / before of the sums, with a 95% bootstrap interval over configurations."""
        r = c[boot, 1].sum(axis=1) / c[boot, 0].sum(axis=1)
        lo, hi = np.percentile(r, [2.5, 97.5])
        return f"x{c[:, 1].sum() / c[:, 0].sum():.2f} [{lo:.2f}, {hi:.2f}]"

    for name, c, tie in (("search", costs[:, 0], same["search"]),
                         ("confirmation", costs[:, 1], same["confirmation"]),
                         ("all", costs.sum(axis=1), None)):
        for m, method in enumerate(("before", "after")):
            probes, requests, minutes = c[:, m].sum(axis=0)
            table.add_row(name, method, f"{probes:.0f}", f"{requests:.0f}", f"{minutes:.0f}",
                          *((f"{tie[0]}/{tie[2]}", f"{tie[1]}/{tie[2]}") if tie and m else ("", "")))
        table.add_row("", "after/before", *(ratio(c[:, :, j]) for j in range(3)), "", "")
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--synthetic", action="store_true", help="replay a study on synthetic latencies")
    ap.add_argument("--configs", type=int, default=200)
    ap.add_argument("--spread", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slos", nargs="+", default=["p99_tpot_ms<=400", "p99_ttft_ms<=4000"])
    ap.add_argument("--slo", default="p99_tpot_ms<=10")
    ap.add_argument("--low", type=float, default=1)
    ap.add_argument("--high", type=float, default=64)
    ap.add_argument("--scan-step", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    args = ap.parse_args()
    console = Console()
    if args.synthetic:
        synthetic(args, console)
        return
    limit = parse_limit(args.slo, f"--slo {args.slo!r}")
    spec = CapacitySpec(low=args.low, high=args.high, limits=(limit,))
    profile = dataclasses.replace(get_profile("capacity"), num_prompts=args.num_prompts,
                                  input_len=args.input_len, output_len=args.output_len,
                                  capacity=spec)
    slo = goodput_limits(spec)
    work = Path(tempfile.mkdtemp(prefix="capacity-bench-"))
    info = make_model(work / "model", kind="moe", mtp=True, seed=0)
    model = info.name
    dep_spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "1",
                                                    "--max-model-len", "4096"),
                              slot=Slot("cpu", (0,), 1), log_path=work / "server.log")
    rows = []
    with ServerProcess(dep_spec) as dep:
        target = Target(url=dep.url, model=dep.model_name, api_key=dep.api_key)
        seed = 0

        def measure(load: float, why: str, settle: SettleRule | None) -> Probe:
            nonlocal seed
            seed += 1
            return Probe(load, flat_metrics(run_profile(
                target, profile.at_load(load), seed=seed, source=RandomPrompts(info.vocab_size),
                slo=slo).summary))

        measure(8, "warm-up", None)  # the first runs after start are slower; not counted
        for r in range(1, args.rounds + 1):
            methods = {
                "autotune (bracket + bisect)": lambda: _ends(search("capacity", spec, measure)),
                "linear descent (auto_tune.sh)": lambda: linear_descent(spec, measure),
                f"uniform scan, step {args.scan_step} (bench sweep)":
                    lambda: uniform_scan(spec, measure, args.scan_step),
            }
            order = list(methods.items())
            order = order[r - 1:] + order[:r - 1]  # rotate: no method always runs first
            for name, run in order:
                t0 = time.monotonic()
                met, missed, probes = run()
                rows.append((r, name, probes, time.monotonic() - t0, met, missed))
                console.print(f"round {r} {name}: {probes} probes, {rows[-1][3]:.0f} s, "
                              f"met {met}, missed {missed}")
    table = Table(title=f"finding the highest max concurrency with {args.slo} in "
                        f"[{args.low:g}, {args.high:g}] on one deployment")
    for col in ("round", "method", "probes", "seconds", "met at", "missed at"):
        table.add_column(col, justify="right" if col not in ("method",) else "left")
    for r, name, probes, secs, met, missed in sorted(rows, key=lambda x: (x[1], x[0])):
        table.add_row(str(r), name, str(probes), f"{secs:.0f}", f"{met:g}" if met else "-",
                      f"{missed:g}" if missed else "-")
    console.print(table)


def _ends(found) -> tuple[float | None, float | None, int]:
    return found.boundary.load, found.boundary.fail_load, len(found.probes)


if __name__ == "__main__":
    main()
