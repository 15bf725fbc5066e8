"""MTP speculative decoding's trade-off on CPU with a model whose MTP head really predicts.

Generates (or reuses) the trained tiny MoE+MTP model, deploys it twice with TP=2 (without and
with ``--speculative-config '{"method":"mtp","num_speculative_tokens":1}'``), and measures
both workload profiles (reduced request counts) R times on each deployment, interleaved.
Prints output throughput, mean E2EL and the acceptance rate, each run and the spread.

    .venv/bin/python benchmarks/experiments/mtp_tradeoff.py [--repeats 2] [--model DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import make_slots
from autotune.core.workload.profiles import ProfileOverrides, get_profile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.checkpoints import make_model
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.server.server import DeploymentSpec, ServerProcess

MTP = '{"method":"mtp","num_speculative_tokens":1}'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model", help="a trained model folder (default: generate one)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mtp-tradeoff-"))
    model = args.model or make_model(work / "trained", kind="moe", mtp=True, trained=True).name
    profiles = [
        get_profile("low-concurrency", ProfileOverrides(num_prompts=16, input_len=256, output_len=128)),
        get_profile("high-concurrency", ProfileOverrides(num_prompts=64, input_len=256,
                                                         output_len=128, max_concurrency=64)),
    ]
    rows = []
    for label, extra in (("no MTP", ()), ("MTP", ("--speculative-config", MTP))):
        spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "2", "--max-model-len",
                              "4096", *extra), slot=make_slots("cpu", [0, 1], 2)[0],
                              log_path=work / f"server-{label.replace(' ', '-')}.log")
        with ServerProcess(spec) as dep:
            target = Target(dep.url, dep.model_name, dep.api_key)
            for profile in profiles:
                runs = [run_profile(target, profile, seed=100 + r, source=RandomPrompts(512)).summary
                        for r in range(args.repeats)]
                rows.append((label, profile.name, runs, dep.startup_s))
    table = Table(title=f"MTP on the trained tiny MoE (CPU, TP=2), {args.repeats} runs each")
    for col in ("deployment", "profile", "output tok/s (runs)", "spread", "mean E2EL ms (runs)",
                "spread", "acceptance"):
        table.add_column(col, justify="right")

    def spread(values: list[float]) -> str:
        return f"{(max(values) - min(values)) / statistics.fmean(values) * 100:.1f}%"

    for label, profile, runs, _ in rows:
        tps = [r.output_throughput_tok_s for r in runs]
        lats = [r.e2el.mean_ms for r in runs]
        acc = [r.server["spec_decode_acceptance_rate"] / 100 for r in runs
               if "spec_decode_acceptance_rate" in r.server]
        table.add_row(label, profile, " / ".join(f"{v:.1f}" for v in tps), spread(tps),
                      " / ".join(f"{v:.0f}" for v in lats), spread(lats),
                      " / ".join(f"{a:.1%}" for a in acc) or "-")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
