"""Overhead of autotune per trial: what a trial costs beyond start-up and benchmarking.

Runs a small real study (CPU build, TP=2, a generated tiny dense model, a 2-value space) and
prints, per trial: wall time from ask to tell, readiness (start-up) time, benchmark time
(warm-up and measured runs of every profile), and the rest (validation, teardown, Optuna,
artifacts) as a share of the trial.

    .venv/bin/python benchmarks/experiments/trial_overhead.py [--trials 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
from rich.console import Console
from rich.table import Table

from autotune.modelgen.checkpoints import make_model

SPACE = """
name: overhead
deployment: {tensor_parallel_size: 2, max_model_len: 4096}
parameters:
  - {name: performance_mode, type: categorical, choices: [throughput, interactivity],
     default: throughput, flag: --performance-mode}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trial-overhead-"))
    model = make_model(work / "dense", kind="dense").name
    (work / "space.yaml").write_text(SPACE)
    subprocess.run(
        [sys.executable, "-m", "autotune", "--workdir", str(work / "studies"), "run",
         "--model", model, "--space", str(work / "space.yaml"), "--study", "overhead",
         "--trials", str(args.trials), "--profile", "low-concurrency", "--profile",
         "high-concurrency", "--num-prompts", "8", "--input-len", "128", "--output-len", "32"],
        check=True,
    )
    study = optuna.load_study(study_name="overhead",
                              storage=f"sqlite:///{work / 'studies' / 'autotune.db'}")
    table = Table(title="per-trial overhead (seconds)")
    for col in ("trial", "wall", "readiness", "benchmark", "overhead", "share"):
        table.add_column(col, justify="right")
    shares = []
    for t in study.trials:
        a = t.user_attrs
        wall, ready, bench = a["trial_wall_s"], a["startup_s"], a["bench_s"]
        overhead = wall - ready - bench
        shares.append(overhead / wall)
        table.add_row(str(t.number), f"{wall:.1f}", f"{ready:.1f}", f"{bench:.1f}",
                      f"{overhead:.1f}", f"{overhead / wall:.1%}")
    table.add_row("mean", "", "", "", "", f"{sum(shares) / len(shares):.1%}")
    Console().print(table)


if __name__ == "__main__":
    main()
