"""Client CPU cost and agreement: autotune's benchmark client vs `vllm bench serve`.

Starts one real vLLM server (CPU build, TP=2, a generated tiny dense model), then interleaves
runs of both clients on it (ours, theirs, ours, ...) at concurrency 2 and at a high
concurrency, and prints a table: client CPU seconds per 1000 streamed tokens, and the
metrics each client reported, run by run, with the spread between repeats.

    .venv/bin/python benchmarks/experiments/client_overhead.py [--repeats 3] [--high 32]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import make_slots
from autotune.core.metrics.summary import to_vllm_json
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.checkpoints import make_model
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.bench.reference_bench import run_vllm_bench
from autotune.shell.server.server import DeploymentSpec, ServerProcess

KEYS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")


def measure(tool: str, target: Target, profile: WorkloadProfile, seed: int) -> dict:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if tool == "autotune":
        result = to_vllm_json(run_profile(target, profile, seed=seed, source=RandomPrompts(512)).summary)
    else:
        result = run_vllm_bench(target.url, target.model, target.api_key, profile, seed=seed)
    cpu = time.process_time() - cpu0
    result["client_cpu_s_per_1k_tok"] = cpu / (result["total_output_tokens"] / 1000.0)
    result["wall_s"] = time.perf_counter() - wall0
    return result


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{(max(values) - min(values)) / mean * 100:.1f}%" if mean else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--high", type=int, default=32, help="the high concurrency level")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--tp", type=int, default=2, help="2: one core per rank; 1: the server on core "
                    "0, leaving core 1 to the API server and the client (less contention)")
    ap.add_argument("--output-len", type=int, default=128)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="client-overhead-"))
    model = make_model(work / "dense", kind="dense").name
    slot = make_slots("cpu", [0, 1], args.tp)[0]
    spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", str(args.tp),
                          "--max-model-len", "4096"), slot=slot, log_path=work / "server.log")
    base = WorkloadProfile(name="check", input_len=args.input_len, output_len=args.output_len,
                           num_prompts=args.num_prompts, warmup_requests=2)
    console = Console(width=140)
    with ServerProcess(spec) as dep:
        target = Target(dep.url, dep.model_name, dep.api_key)
        for concurrency in (2, args.high):
            profile = dataclasses.replace(base, max_concurrency=concurrency)
            runs: dict[str, list[dict]] = {"autotune": [], "vllm bench serve": []}
            for r in range(args.repeats):
                for tool in runs:  # interleaved, so drift hits both tools alike
                    runs[tool].append(measure(tool, target, profile, seed=100 + r))
            table = Table(title=f"concurrency {concurrency}: {args.input_len} in, "
                          f"{args.output_len} out, "
                          f"{args.num_prompts} requests, {args.repeats} runs each")
            table.add_column("client")
            for key in ("client_cpu_s_per_1k_tok", *KEYS):
                table.add_column(key, justify="right")
            for tool, results in runs.items():
                for i, res in enumerate(results):
                    table.add_row(f"{tool} #{i + 1}", *[f"{res[k]:.3f}" for k in
                                  ("client_cpu_s_per_1k_tok", *KEYS)])
                table.add_row(f"{tool} spread", *[spread([x[k] for x in results]) for k in
                              ("client_cpu_s_per_1k_tok", *KEYS)])
            console.print(table)


if __name__ == "__main__":
    main()
