"""Does autotune's client send what `vllm bench serve` sends, and measure what it measures?

One vLLM server (TP=1, a tiny dense model made here), the two clients interleaved on it (ours,
theirs, theirs, ours, ...): a random text workload (our ``random`` format against vLLM's random
dataset) and a JSONL file (our ``jsonl`` format against vLLM's ``custom`` dataset), each at
``--concurrency`` with ``--requests`` requests of ``--input-len`` in / ``--output-len`` out.
Prints per workload and client the medians over runs of output throughput, mean E2EL, median
TTFT and mean TPOT, and our difference from vLLM's; writes them as JSON to ``--out``.
Made for a GPU machine (`../shared/notes/vllm-on-gpu.md`); needs no Optuna.

    python3 benchmarks/gpu_agreement.py --entrypoint 'python3 -m vllm.entrypoints.cli.main serve'
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.deployment.slots import Slot  # noqa: E402
from autotune.core.metrics.summary import to_vllm_json  # noqa: E402
from autotune.core.workload.datasets import source_of, validate_dataset_spec  # noqa: E402
from autotune.core.workload.datasets.synthetic import WORDS  # noqa: E402
from autotune.core.workload.profiles import DatasetSpec, WorkloadProfile  # noqa: E402
from autotune.shell.client import Target, run_profile  # noqa: E402
from autotune.shell.install import resolve_entrypoint  # noqa: E402
from autotune.shell.modelgen import make_model  # noqa: E402
from autotune.shell.reference_bench import run_vllm_bench  # noqa: E402
from autotune.shell.server import DeploymentSpec, ServerProcess  # noqa: E402
from autotune.shell.workloads import load_tokenizer  # noqa: E402

KEYS = ("output_throughput", "mean_e2el_ms", "median_ttft_ms", "mean_tpot_ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entrypoint", help="command that starts vLLM, as a string")
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--pairs", type=int, default=2, help="interleaved pairs of runs per workload")
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--out", default="gpu-agreement.json")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agreement-"))
    model = make_model(root / "dense", kind="dense", seed=0).name
    tokenizer = load_tokenizer(model)
    rows = [{"prompt": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(args.input_len)),
             "output_tokens": args.output_len} for i in range(args.requests + args.concurrency)]
    data = root / "requests.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    profile = WorkloadProfile(name="agree", input_len=args.input_len, output_len=args.output_len,
                              num_prompts=args.requests, max_concurrency=args.concurrency,
                              warmup_requests=args.concurrency)
    ours = {"random text": source_of(validate_dataset_spec(DatasetSpec("random"), "agreement"), None,
                                     tokenizer, "random"),
            "jsonl file": source_of(validate_dataset_spec(DatasetSpec("jsonl", str(data)), "agreement"),
                                    data.read_text(), tokenizer, str(data))}
    theirs = {"random text": None, "jsonl file": str(data)}
    entry = resolve_entrypoint(shlex.split(args.entrypoint) if args.entrypoint else None)
    devices = tuple(int(g) for g in args.gpus.split(","))
    spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "1", "--max-model-len", "4096"),
                          slot=Slot("cuda", devices, 1), entrypoint=entry, log_path=root / "server.log",
                          startup_timeout_s=900)
    results: dict[str, dict[str, list[dict]]] = {w: {"ours": [], "vllm": []} for w in ours}
    with ServerProcess(spec) as dep:
        print(f"ready in {dep.startup_s:.0f} s", flush=True)
        target = Target(dep.url, dep.model_name, dep.api_key)
        for workload in ours:
            for r, tool in enumerate(["ours", "vllm", "vllm", "ours"] * args.pairs):
                if tool == "ours":
                    run = to_vllm_json(run_profile(target, profile, seed=r, source=ours[workload]).summary)
                else:
                    run = run_vllm_bench(target.url, target.model, target.api_key, profile, seed=r,
                                         dataset_path=theirs[workload], tokenizer=model)
                results[workload][tool].append({k: float(run[k]) for k in KEYS})
                print(workload, tool, {k: round(float(run[k]), 2) for k in KEYS}, flush=True)
    summary = {}
    print(f"\n{args.requests} requests of {args.input_len} in / {args.output_len} out at concurrency "
          f"{args.concurrency}, medians over {2 * args.pairs} runs per client")
    for workload, by in results.items():
        summary[workload] = {}
        for k in KEYS:
            a = statistics.median(r[k] for r in by["ours"])
            b = statistics.median(r[k] for r in by["vllm"])
            summary[workload][k] = {"ours": a, "vllm": b, "difference": a / b - 1}
            print(f"{workload:12s} {k:18s} ours {a:10.2f}  vllm {b:10.2f}  {a / b - 1:+.1%}")
    Path(args.out).write_text(json.dumps({"summary": summary, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
