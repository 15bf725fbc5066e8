"""How many requests does a high-concurrency run need? Spread of identical runs against count.

One TP=2 deployment of the generated dense model on the CPU build (workers niced, as every CPU
deployment). At concurrency ``--concurrency`` a run of as many requests as the concurrency is a
single wave: it measures the ramp-up and the drain as much as the load. Per request count of
``--counts`` (interleaved, ``--runs`` runs each, fresh prompts each): the spread of output
throughput and mean E2EL between identical runs (log-sd) and the seconds a run costs.

    .venv/bin/python benchmarks/experiments/wave_spread.py [--counts 100,200,400] [--runs 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.core.deployment.slots import Slot  # noqa: E402
from autotune.core.metrics.summary import to_vllm_json  # noqa: E402
from autotune.core.workload.profiles import WorkloadProfile  # noqa: E402
from autotune.core.workload.requests import RandomPrompts  # noqa: E402
from autotune.modelgen.checkpoints import make_model  # noqa: E402
from autotune.shell.bench.client import Target, run_profile  # noqa: E402
from autotune.shell.server.server import DeploymentSpec, ServerProcess  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", default="100,200,400")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    root = Path(tempfile.mkdtemp(prefix="wave-spread-"))
    model = make_model(root / "dense", kind="dense", seed=0).name
    spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "2", "--max-model-len", "4096"),
                          slot=Slot("cpu", (0, 1), 2), log_path=root / "server.log")
    found: dict[int, list[tuple[dict, float]]] = {n: [] for n in counts}
    with ServerProcess(spec) as dep:
        target = Target(dep.url, dep.model_name, dep.api_key)
        for r in range(args.runs):
            for n in (counts if r % 2 == 0 else counts[::-1]):
                profile = WorkloadProfile(name="high", input_len=args.input_len, output_len=args.output_len,
                                          num_prompts=n, max_concurrency=args.concurrency)
                t0 = time.monotonic()
                run = run_profile(target, profile, seed=1000 * n + r, source=RandomPrompts(512))
                found[n].append((to_vllm_json(run.summary), time.monotonic() - t0))
    table = Table(title=f"{args.runs} runs per count at concurrency {args.concurrency}, "
                        f"{args.input_len} in / {args.output_len} out, TP=2 on 2 cores")
    for col in ("requests", "waves", "output tok/s median", "log-sd", "mean E2EL ms median", "log-sd",
                "s per run"):
        table.add_column(col, justify="right")
    for n, runs in found.items():
        tput = [r["output_throughput"] for r, _ in runs]
        e2el = [r["mean_e2el_ms"] for r, _ in runs]
        table.add_row(str(n), f"{n / args.concurrency:g}", f"{statistics.median(tput):,.0f}",
                      f"{np.std(np.log(tput), ddof=1):.1%}", f"{statistics.median(e2el):,.0f}",
                      f"{np.std(np.log(e2el), ddof=1):.1%}",
                      f"{statistics.fmean(s for _, s in runs):.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
