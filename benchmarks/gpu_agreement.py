"""Does autotune's client measure what `vllm bench serve` measures, and which of the two is closer
to the server's own clock?

One vLLM server (prefix caching off), the two clients interleaved on it for ``--rounds`` rounds
per load (round r sends ours then vLLM's, the next round the other way round), each run with
its own seed: ours sends text made as vLLM's random dataset makes it (our ``random`` format),
vLLM's is ``vllm bench serve --dataset-name random``. A first round of each client at each load
is not counted (imports, the server's first waves). Around every run the server's /metrics
is read: its histograms' _sum/_count give the server's mean TTFT, TPOT, ITL and E2EL over the
run (the referee: the API server's clock from a request's arrival to its first/last token, the
engine's between tokens). Each run also records the CPU seconds this process spent (both clients
run in it, one at a time). Prints per load the paired 95% interval, over rounds, of ours against
vLLM's and of each client against the server; writes every run and the summary as JSON.

    python3 benchmarks/gpu_agreement.py --entrypoint 'python3 -m vllm.entrypoints.cli.main serve' \\
        --model /root/m80 --loads 2:30 --rounds 5 --out $OUT/agreement-c2.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.deployment.slots import Slot  # noqa: E402
from autotune.core.deployment.startup import stamped_text  # noqa: E402
from autotune.core.maths.stats import t_quantile  # noqa: E402
from autotune.core.metrics.summary import server_values, to_vllm_json  # noqa: E402
from autotune.core.workload.datasets import source_of, validate_dataset_spec  # noqa: E402
from autotune.core.workload.profiles import DatasetSpec, WorkloadProfile  # noqa: E402
from autotune.modelgen.checkpoints import make_model  # noqa: E402
from autotune.shell.bench.client import Target, run_profile  # noqa: E402
from autotune.shell.bench.reference_bench import run_vllm_bench  # noqa: E402
from autotune.shell.bench.server_metrics import fetch_metrics  # noqa: E402
from autotune.shell.bench.workloads import load_tokenizer  # noqa: E402
from autotune.shell.server.install import resolve_entrypoint  # noqa: E402
from autotune.shell.server.server import DeploymentSpec, ServerProcess  # noqa: E402

CLIENT_KEYS = ("output_throughput", "mean_e2el_ms", "median_ttft_ms", "mean_ttft_ms", "mean_tpot_ms",
               "mean_itl_ms")
# A client's figure and the server's figure of the same quantity.
REFEREE = {"mean_ttft_ms": "server_mean_ttft_ms", "mean_e2el_ms": "server_mean_e2el_ms",
           "mean_tpot_ms": "server_mean_tpot_ms", "mean_itl_ms": "server_mean_itl_ms"}


async def _page(target: Target):
    async with aiohttp.ClientSession(trust_env=False) as s:
        return await fetch_metrics(s, target.url, target.headers())


def measured(target: Target, run) -> dict[str, float]:
    """One run (a callable returning vLLM's result dict) with the server's figures around it and
    this process's CPU seconds during it."""
    before = asyncio.run(_page(target))
    cpu, wall = time.process_time(), time.monotonic()
    result = run()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    after = asyncio.run(_page(target))
    row = {k: float(result[k]) for k in CLIENT_KEYS}
    return row | server_values(before, after, []) | {"client_cpu_s": cpu, "wall_s": wall}


def paired(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean of log(a/b) over pairs as a percentage, with its 95% t-interval."""
    d = [math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0 and y > 0]
    m = statistics.fmean(d)
    half = t_quantile(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else math.inf
    return tuple(100 * (math.exp(v) - 1) for v in (m, m - half, m + half))  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entrypoint", help="command that starts vLLM, as a string")
    ap.add_argument("--model", help="a model folder (default: a tiny dense model made here)")
    ap.add_argument("--gpus", default="0", 
                    help="GPU ids; 'cpu': core 0 of the CPU build (a check of the script)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (one run of each client) per load")
    ap.add_argument("--loads", default="2:60", help="CONCURRENCY:REQUESTS,... e.g. 2:60,100:200")
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--max-model-len", default="4096")
    ap.add_argument("--out", default="gpu-agreement.json")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agreement-"))
    model = args.model or make_model(root / "dense", kind="dense", seed=0).name
    tokenizer = load_tokenizer(model)
    ours_source = source_of(validate_dataset_spec(DatasetSpec("random"), "agreement"), None, tokenizer, "random")
    entry = resolve_entrypoint(shlex.split(args.entrypoint) if args.entrypoint else None)
    slot = Slot("cpu", (0,), 1) if args.gpus == "cpu" else Slot("gpu", tuple(int(g) for g in args.gpus.split(",")), 1)
    spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "1", "--max-model-len",
                                                args.max_model_len, "--no-enable-prefix-caching"),
                          slot=slot, entrypoint=entry, log_path=root / "server.log",
                          startup_timeout_s=900)
    out: dict = {"args": vars(args), "loads": {}}
    out_path = Path(args.out)
    with ServerProcess(spec) as dep:
        phases = dep.phases()
        out["ready_s"], out["startup_phases"] = dep.startup_s, phases.as_dict() if phases else {}
        print(f"ready in {dep.startup_s:.0f} s: {out['startup_phases']}", flush=True)
        # The start's stamped lines beside the results (parse_stamped reads them back).
        out_path.with_suffix(".stamped.log").write_text(stamped_text(dep.startup_lines()))
        target = Target(dep.url, dep.model_name, dep.api_key)
        for load in args.loads.split(","):
            conc, n = (int(x) for x in load.split(":"))
            profile = WorkloadProfile(name=f"c{conc}", input_len=args.input_len, output_len=args.output_len,
                                      num_prompts=n, max_concurrency=conc, warmup_requests=conc)
            warm = WorkloadProfile(name="warm", input_len=args.input_len, output_len=args.output_len,
                                   num_prompts=2 * conc, max_concurrency=conc)
            run_profile(target, warm, seed=1, source=ours_source)  # not counted: imports, first waves
            run_vllm_bench(target.url, target.model, target.api_key, warm, seed=1, tokenizer=model)
            runs: dict[str, list[dict]] = {"ours": [], "vllm": []}
            out["loads"][load] = {"runs": runs}
            for r in range(args.rounds):
                for tool in (("ours", "vllm") if r % 2 == 0 else ("vllm", "ours")):
                    seed = 1000 * conc + 2 * r + (tool == "vllm")
                    if tool == "ours":
                        row = measured(target, lambda s=seed, p=profile: to_vllm_json(
                            run_profile(target, p, seed=s, source=ours_source).summary))
                    else:
                        row = measured(target, lambda s=seed, p=profile: run_vllm_bench(
                            target.url, target.model, target.api_key, p, seed=s, tokenizer=model))
                    runs[tool].append(row)
                    print(load, r, tool, {k: round(v, 2) for k, v in row.items()}, flush=True)
                out_path.write_text(json.dumps(out, indent=1))  # what is done survives a time limit
            summary = {}
            for k in (*CLIENT_KEYS, "client_cpu_s"):
                summary[f"ours vs vllm: {k}"] = paired([x[k] for x in runs["ours"]], [x[k] for x in runs["vllm"]])
            for k, server in REFEREE.items():
                for tool in runs:
                    rows = [x for x in runs[tool] if server in x]
                    if len(rows) > 1:
                        summary[f"{tool} vs server: {k}"] = paired([x[k] for x in rows], [x[server] for x in rows])
            out["loads"][load]["summary"] = summary
            print(f"\nconcurrency {conc}, {n} requests of {args.input_len} in / {args.output_len} out, "
                  f"{args.rounds} interleaved rounds: mean difference and paired 95% interval")
            for name, (m, lo, hi) in summary.items():
                print(f"  {name:34s} {m:+6.1f}% [{lo:+.1f}, {hi:+.1f}]")
            out_path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
