"""Noise of the study's objectives: repeats on one deployment against fresh deployments.

Deploys the same configuration ``--deployments`` times (CPU build, TP=2, the generated trained
MoE+MTP model that `autotune run` uses), and on each runs both reference profiles (shrunk:
``--input-len``/``--output-len``, concurrency 2 and ``--high``) ``--repeats`` times at each
request count of ``--counts``. Prints, per profile, metric and request count: the noise between
repeats on one deployment and between deployments (log-scale standard deviation, i.e. relative),
the seconds one run costs, and then the protocol (requests, repeats) that brings the standard
error of the front's two objectives below ``--target`` (or the lowest reachable, said plainly).

    .venv/bin/python benchmarks/experiments/noise.py [--deployments 3] [--repeats 3] [--counts 8,16,32]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import make_slots
from autotune.core.metrics.summary import flat_metrics
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.checkpoints import make_model
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.server.server import DeploymentSpec, ServerProcess

OBJECTIVES = (("low", "mean_e2el_ms"), ("high", "output_throughput"))
METRICS = ("output_throughput", "mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms")


def log_sd_within(groups: list[list[float]]) -> float:
    ss = sum(float(np.sum((np.log(g) - np.log(g).mean()) ** 2)) for g in groups)
    df = sum(len(g) - 1 for g in groups)
    return math.sqrt(ss / df) if df else math.nan


def log_sd_between(groups: list[list[float]]) -> float:
    """Standard deviation of the deployments' mean log values, less what the repeats explain."""
    means = [float(np.log(g).mean()) for g in groups]
    if len(means) < 2:
        return math.nan
    var_means = float(np.var(means, ddof=1))
    within = log_sd_within(groups) ** 2 / len(groups[0])
    return math.sqrt(max(var_means - within, 0.0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deployments", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--counts", default="8,16,32", help="requests per run")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--high", type=int, default=16, help="concurrency of the high profile")
    ap.add_argument("--target", type=float, default=0.03, help="wanted relative standard error")
    ap.add_argument("--model", help="default: generate the trained MoE+MTP model")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="autotune-noise-"))
    model = args.model or make_model(root / "model", kind="moe", mtp=True, trained=True).name
    slot = make_slots("cpu", [0, 1], 2, per_rank=1)[0]
    # data[(profile, count, metric)] = one list of repeat values per deployment
    data: dict[tuple[str, int, str], list[list[float]]] = {}
    seconds: dict[tuple[str, int], list[float]] = {}
    for d in range(args.deployments):
        spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "2",
                                                     "--max-model-len", "4096"),
                              slot=slot, log_path=root / f"server-{d}.log")
        with ServerProcess(spec) as dep:
            console.print(f"deployment {d + 1}/{args.deployments}: ready in {dep.startup_s:.0f} s")
            target = Target(dep.url, dep.model_name, dep.api_key)
            for count in counts:
                for name, conc in (("low", 2), ("high", args.high)):
                    profile = WorkloadProfile(name=name, input_len=args.input_len,
                                              output_len=args.output_len, num_prompts=count,
                                              max_concurrency=conc, warmup_requests=2)
                    runs: dict[str, list[float]] = {m: [] for m in METRICS}
                    for r in range(args.repeats):
                        t0 = time.monotonic()
                        run = run_profile(target, profile, seed=1000 * d + 10 * count + r,
                                          source=RandomPrompts(512))
                        seconds.setdefault((name, count), []).append(time.monotonic() - t0)
                        flat = flat_metrics(run.summary)
                        for m in METRICS:
                            runs[m].append(flat[m])
                    for m in METRICS:
                        data.setdefault((name, count, m), []).append(runs[m])
                    console.print(f"  {name} x{count}: " + ", ".join(
                        f"{m} {np.mean(runs[m]):.1f}" for m in METRICS))
    table = Table(title=f"noise ({args.deployments} deployments x {args.repeats} repeats; "
                        "log-scale sd = relative sd)")
    for col in ("profile", "requests", "metric", "within a deployment", "between deployments",
                "s per run"):
        table.add_column(col, justify="right")
    for (name, count, metric), groups in sorted(data.items()):
        table.add_row(name, str(count), metric, f"{log_sd_within(groups):.1%}",
                      f"{log_sd_between(groups):.1%}", f"{np.mean(seconds[(name, count)]):.1f}")
    console.print(table)
    best: tuple[float, str] | None = None
    for count in counts:
        for repeats in (1, 2, 3, 4, 6):
            worst, cost = 0.0, 0.0
            for name, metric in OBJECTIVES:
                groups = data[(name, count, metric)]
                se = math.sqrt(log_sd_between(groups) ** 2 + log_sd_within(groups) ** 2 / repeats)
                worst = max(worst, se)
                cost += repeats * float(np.mean(seconds[(name, count)]))
            line = (f"{count} requests x {repeats} repeats: standard error of the front's "
                    f"objectives {worst:.1%}, {cost:.0f} s of benchmark per trial")
            if worst <= args.target and (best is None or cost < best[0]):
                best = (cost, line)
            console.print(line)
    console.print("cheapest protocol under the target: " + (best[1] if best else
                  f"none reaches {args.target:.0%} here; see the lowest standard error above"))


if __name__ == "__main__":
    main()
