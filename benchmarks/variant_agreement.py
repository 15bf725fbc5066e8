"""Does a change to how autotune deploys vLLM leave the measured numbers the same?

Deploys one configuration two ways, A (as given) and B (A plus ``--env-b`` variables and
``--option-b`` flags), in interleaved rounds (A B, then B A), ``--rounds`` deployments of each.
On each deployment: one warm-up run per load (not counted), then ``--runs`` runs per load, each
with its own seed; a deployment's figure is the mean of its runs. Prints per load and metric
the paired 95% t-interval over rounds of B against A (mean of log ratios, as a percentage),
each deployment's ready seconds and compile phase, and writes every run as JSON. A change is
kept where every interval lies within the stated tolerance (the issue's: +-2% on a GPU).

    .venv/bin/python benchmarks/variant_agreement.py --env-b VLLM_USE_AOT_COMPILE=0 --rounds 4
    python3 benchmarks/variant_agreement.py --gpus 0 --tp 1 --model /root/m80 \\
        --option-b=--max-cudagraph-capture-size=200 --loads 2:40,100:200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_agreement import paired  # noqa: E402  (mean of log(first/second), its 95% interval)

from autotune.core.deployment.slots import Slot  # noqa: E402
from autotune.core.metrics.summary import to_vllm_json  # noqa: E402
from autotune.core.workload.datasets import source_of, validate_dataset_spec  # noqa: E402
from autotune.core.workload.profiles import DatasetSpec, WorkloadProfile  # noqa: E402
from autotune.modelgen.checkpoints import make_model  # noqa: E402
from autotune.shell.bench.client import Target, run_profile  # noqa: E402
from autotune.shell.bench.workloads import load_tokenizer  # noqa: E402
from autotune.shell.server.server import DeploymentSpec, ServerProcess, preimported_launcher  # noqa: E402

KEYS = ("output_throughput", "mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="a model folder (default: the generated tiny dense model)")
    ap.add_argument("--gpus", help="GPU ids, e.g. 0 (default: the CPU build on cores 0..tp-1)")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--option", action="append", default=[], help="a vLLM flag of both A and B")
    ap.add_argument("--option-b", action="append", default=[], help="a vLLM flag of B only")
    ap.add_argument("--env-b", action="append", default=[], help="NAME=VALUE in B's environment only")
    ap.add_argument("--preimported-b", action="store_true",
                    help="B's deployments forked from the pre-imported launcher (A: new processes)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2, help="measured runs per load and deployment")
    ap.add_argument("--loads", default="2:8,16:32", help="CONCURRENCY:REQUESTS,...")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--out", default="variant-agreement.json")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="variant-"))
    model = args.model or make_model(root / "dense", kind="dense", seed=0).name
    source = source_of(validate_dataset_spec(DatasetSpec("random"), "variant"), None,
                       load_tokenizer(model), "random")
    slot = (Slot("gpu", tuple(int(g) for g in args.gpus.split(",")), args.tp) if args.gpus
            else Slot("cpu", tuple(range(args.tp)), args.tp))
    env_b = tuple(tuple(e.split("=", 1)) for e in args.env_b)
    loads = [tuple(int(x) for x in load.split(":")) for load in args.loads.split(",")]
    launcher = preimported_launcher(None) if args.preimported_b else None
    if launcher is not None:
        assert launcher.warm(), launcher.failed
    rows: dict[str, list[dict]] = {"A": [], "B": []}
    out = {"args": vars(args), "rows": rows}
    for r in range(args.rounds):
        for variant in ("A", "B") if r % 2 == 0 else ("B", "A"):
            spec = DeploymentSpec(
                model=model, slot=slot, log_path=root / f"server-{r}-{variant}.log",
                options=("--tensor-parallel-size", str(args.tp), *args.option,
                         *(args.option_b if variant == "B" else ())),
                extra_env=env_b if variant == "B" else (), startup_timeout_s=900,
                launcher=launcher if variant == "B" else None)
            with ServerProcess(spec) as dep:
                assert dep.preimported == (variant == "B" and launcher is not None)
                phases = dep.phases()
                row: dict = {"round": r, "ready_s": dep.startup_s,
                             "phases": phases.as_dict() if phases else {}}
                target = Target(dep.url, dep.model_name, dep.api_key)
                for conc, n in loads:
                    profile = WorkloadProfile(name=f"c{conc}", input_len=args.input_len,
                                              output_len=args.output_len, num_prompts=n,
                                              max_concurrency=conc)
                    run_profile(target, profile, seed=7, source=source)  # warm-up, not counted
                    runs = [to_vllm_json(run_profile(target, profile, seed=1000 * r + 10 * k + conc,
                                                     source=source).summary)
                            for k in range(args.runs)]
                    row[f"c{conc}"] = {key: statistics.fmean(float(x[key]) for x in runs) for key in KEYS}
            rows[variant].append(row)
            compile_s = row["phases"].get("compile_s", 0.0)
            print(f"round {r + 1} {variant}: ready {row['ready_s']:.1f} s, compile {compile_s:.1f} s, "
                  + ", ".join(f"c{c} {row[f'c{c}']['output_throughput']:.1f} tok/s" for c, _ in loads),
                  flush=True)
            Path(args.out).write_text(json.dumps(out, indent=1))
    if launcher is not None:
        launcher.close()
    b_is = " ".join(args.env_b + args.option_b + ["pre-imported"] * args.preimported_b)
    print(f"\nB ({b_is}) against A, {args.rounds} interleaved rounds, "
          f"{args.runs} runs per load and deployment: mean difference, paired 95% interval")
    summary = {}
    for conc, _ in loads:
        for key in KEYS:
            m, lo, hi = paired([x[f"c{conc}"][key] for x in rows["B"]], [x[f"c{conc}"][key] for x in rows["A"]])
            summary[f"c{conc} {key}"] = (m, lo, hi)
            print(f"  c={conc:<4d} {key:20s} {m:+6.1f}% [{lo:+.1f}, {hi:+.1f}]")
    m, lo, hi = paired([x["ready_s"] for x in rows["B"]], [x["ready_s"] for x in rows["A"]])
    print(f"  ready seconds            {m:+6.1f}% [{lo:+.1f}, {hi:+.1f}]")
    out["summary"] = summary
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
