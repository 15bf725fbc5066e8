"""Why our TTFT/TPOT split differed from `vllm bench serve`'s: interleaved runs on one server.

On one real server (CPU build, TP=2 by default, a generated tiny dense model), runs in turn:
vLLM's own client, our client as it sends requests, and our client with a request body changed
in one respect (``--variant``: without ``min_tokens``, which vLLM's client does not send).
Prints every run and the medians of output throughput, mean TTFT, mean TPOT and mean E2EL.

    .venv/bin/python benchmarks/experiments/ttft_agreement.py [--rounds 3] [--tp 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import make_slots
from autotune.core.metrics.summary import to_vllm_json
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.checkpoints import make_model
from autotune.shell.bench import client
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.bench.reference_bench import run_vllm_bench
from autotune.shell.server.server import DeploymentSpec, ServerProcess

KEYS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")


def ours(target: Target, profile: WorkloadProfile, seed: int, drop: str | None) -> dict:
    original = client._payload

    def payload(*args):
        body = original(*args)
        if drop:
            body.pop(drop, None)
        return body

    client._payload = payload
    try:
        return to_vllm_json(run_profile(target, profile, seed=seed, source=RandomPrompts(512)).summary)
    finally:
        client._payload = original


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--num-prompts", type=int, default=24)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--variant", default="min_tokens", help="request field our variant leaves out")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="autotune-ttft-"))
    model = make_model(root / "dense", kind="dense").name
    slot = make_slots("cpu", [0, 1] if args.tp == 2 else [0], args.tp, per_rank=1)[0]
    spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", str(args.tp),
                                                 "--max-model-len", "4096"),
                          slot=slot, log_path=root / "server.log")
    profile = WorkloadProfile(name="agree", input_len=args.input_len, output_len=args.output_len,
                              num_prompts=args.num_prompts, max_concurrency=2, warmup_requests=2)
    runs: dict[str, list[dict]] = {"vllm bench serve": [], "autotune": [],
                                   f"autotune without {args.variant}": []}
    console = Console()
    with ServerProcess(spec) as dep:
        target = Target(dep.url, dep.model_name, dep.api_key)
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for tool in order:
                seed = 100 + r
                if tool == "vllm bench serve":
                    result = run_vllm_bench(dep.url, dep.model_name, dep.api_key, profile, seed=seed)
                else:
                    result = ours(target, profile, seed, None if tool == "autotune" else args.variant)
                runs[tool].append(result)
                console.print(f"round {r + 1} {tool}: " + ", ".join(f"{k} {result[k]:.1f}" for k in KEYS))
    table = Table(title=f"medians of {args.rounds} interleaved runs, TP={args.tp}, "
                        f"{args.input_len} in / {args.output_len} out, concurrency 2")
    table.add_column("client")
    for k in KEYS:
        table.add_column(k, justify="right")
    for tool, results in runs.items():
        table.add_row(tool, *[f"{statistics.median(x[k] for x in results):.1f}" for k in KEYS])
    console.print(table)


if __name__ == "__main__":
    main()
