"""What spreads identical runs on the 2-core CPU machines, and what a setting can cut.

One TP=2 deployment of the generated dense model (one core per rank, as every CPU trial).
vLLM's TP workers wait for the next step by spinning on a shared-memory queue (they
``sched_yield`` for a second after every read: ``shm_broadcast.SpinCondition``), so while the
server is busy two spinning workers share the only two cores with the engine core, the API
server and the benchmark client. Per variant, interleaved: ``--runs`` identical runs (fresh
prompts each) of ``--requests`` requests at concurrency ``--concurrency``. Variants:

- ``as-is``: the workers as vLLM starts them;
- ``niced``: the workers' scheduling priority lowered (``nice`` 19 on their processes): they
  still get every core the others leave idle, but no longer take one from the API server or
  the client while they spin.

A deployment on a CPU slot now nices its workers itself, as this measurement led to; the
``as-is`` variant puts them back to 0 for its runs. Prints per variant: the spread of output
throughput, mean E2EL and median TTFT between runs ((max - min) / mean and log-sd), and the
share of requests whose stream arrived in one burst.

    .venv/bin/python benchmarks/experiments/cpu_spread.py [--runs 6] [--requests 24] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import Slot
from autotune.core.metrics.summary import to_vllm_json
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.checkpoints import make_model
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.server.processes import session_pids
from autotune.shell.server.server import DeploymentSpec, ServerProcess

METRICS = ("output_throughput", "mean_e2el_ms", "median_ttft_ms")


def workers(dep: ServerProcess) -> list[int]:
    """The TP worker processes of a deployment (their process titles name them)."""
    found = []
    for pid in session_pids(dep.pid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "Worker" in title:
            found.append(pid)
    return found


def set_nice(pids: list[int], value: int) -> None:
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():  # every thread of the process
            try:
                os.setpriority(os.PRIO_PROCESS, int(task.name), value)
            except (ProcessLookupError, PermissionError):
                pass


def spread(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    return (max(values) - min(values)) / mean, float(np.std(np.log(values), ddof=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    args = ap.parse_args()
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="cpu-spread-"))
    model = make_model(root / "dense", kind="dense", seed=0).name
    spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "2", "--max-model-len", "4096"),
                          slot=Slot("cpu", (0, 1), 2), log_path=root / "server.log")
    profile = WorkloadProfile(name="spread", input_len=args.input_len, output_len=args.output_len,
                              num_prompts=args.requests, max_concurrency=args.concurrency,
                              warmup_requests=args.concurrency)
    results: dict[str, list[dict]] = {"as-is": [], "niced": []}
    with ServerProcess(spec) as dep:
        pids = workers(dep)
        console.print(f"ready in {dep.startup_s:.0f} s; TP workers {pids}")
        target = Target(dep.url, dep.model_name, dep.api_key)
        for r in range(args.runs):
            for variant in (("as-is", "niced") if r % 2 == 0 else ("niced", "as-is")):
                set_nice(pids, 19 if variant == "niced" else 0)
                run = run_profile(target, profile, seed=100 * r + len(results[variant]),
                                  source=RandomPrompts(512))
                results[variant].append(to_vllm_json(run.summary))
        set_nice(pids, 0)
    table = Table(title=f"{args.runs} runs each, {args.requests} requests of {args.input_len} in / "
                        f"{args.output_len} out at concurrency {args.concurrency}, TP=2 on 2 cores")
    for col in ("variant", *[f"{m}\nmedian, spread, log-sd" for m in METRICS], "bursts"):
        table.add_column(col, justify="right")
    for variant, runs in results.items():
        cells = []
        for m in METRICS:
            values = [run[m] for run in runs]
            s, sd = spread(values)
            cells.append(f"{statistics.median(values):,.1f}, {s:.0%}, {sd:.0%}")
        bursts = sum(run["delivery_bursts"] for run in runs) / sum(run["completed"] for run in runs)
        table.add_row(variant, *cells, f"{bursts:.0%}")
    console.print(table)


if __name__ == "__main__":
    main()
