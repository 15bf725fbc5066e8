"""Run-to-run spread of one client on one CPU server: how far apart can repeats be?

Starts one real vLLM server (CPU build, TP=1 on core 0, a generated tiny dense model) and runs
autotune's client on it again and again (24 requests, 192 in / 64 out, concurrency 2), first
with the scheduler free to place the API server and the client, then with both pinned to core
1, then free again. Prints each run's output throughput and, per block, the median and the
smallest run over the largest. This spread is what the live agreement tests against
`vllm bench serve` must live with (tests/shell/bench/test_client.py, docs/fidelity.md).

    .venv/bin/python benchmarks/experiments/run_spread.py [--runs 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import Slot
from autotune.core.metrics.summary import to_vllm_json
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.checkpoints import make_model
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.server.server import DeploymentSpec, ServerProcess

PROFILE = WorkloadProfile(name="spread", input_len=192, output_len=64, num_prompts=24,
                          max_concurrency=2, warmup_requests=2)
BLOCKS = ("free", "API server + client on core 1", "free again")


def place_api_server(server_pid: int, cores: set[int]) -> None:
    """Every thread of the API server's process (not the engine's or its workers') onto ``cores``."""
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cores)
        except OSError:
            continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs per block (default 8)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="run-spread-"))
    model = make_model(tmp / "dense", kind="dense", seed=0).name
    spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "1", "--max-model-len", "4096"),
                          slot=Slot("cpu", (0,), 1), log_path=tmp / "server.log", startup_timeout_s=600)
    table = Table(title=f"output tok/s of {args.runs} runs per block, one server, in order")
    for column in ("placement", "runs", "median", "min / max"):
        table.add_column(column)
    everything = set(os.sched_getaffinity(0))
    with ServerProcess(spec) as server:
        target = Target(server.url, server.model_name, server.api_key)
        for block in BLOCKS:
            cores = {1} if block.startswith("API") else everything
            place_api_server(server.pid, cores)
            os.sched_setaffinity(0, cores)
            runs = [to_vllm_json(run_profile(target, PROFILE, seed=r, source=RandomPrompts(512)).summary)
                    ["output_throughput"] for r in range(args.runs)]
            table.add_row(block, " ".join(f"{x:.0f}" for x in runs), f"{statistics.median(runs):.0f}",
                          f"{min(runs) / max(runs):.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
