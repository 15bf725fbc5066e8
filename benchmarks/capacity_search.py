"""How many load probes it takes to find a capacity boundary: autotune's search against the
approaches of other tools, on one real deployment.

Deploys the generated MoE+MTP model once (CPU build, TP=1 on core 0: the client and API server
keep core 1), then, in ``--rounds`` interleaved rounds, finds the highest max concurrency at
which ``--slo`` holds with:

- autotune: bracket and bisect on a log scale, loads near the limit measured again
  (``core.trial.capacity_search``), within [--low, --high];
- linear descent, as vLLM's ``benchmarks/auto_tune/auto_tune.sh`` lowers the request rate:
  from --high down by 1 until one run meets the SLO;
- uniform scan, as ``vllm bench sweep`` runs a list of loads and the user reads the limit off
  the plot: every --scan-step from --scan-step to --high, the highest load that met the SLO.

Every probe is the same measured run (the profile at that load, at least 2 requests per
concurrent slot). Prints per round and method: probes, seconds, the load met and the load missed.

    .venv/bin/python benchmarks/capacity_search.py [--slo 'p99_tpot_ms<=10'] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from autotune.core.deployment.slots import Slot
from autotune.core.metrics.slo import parse_limit
from autotune.core.metrics.summary import flat_metrics
from autotune.core.trial.capacity_search import goodput_limits, search
from autotune.core.workload.capacity_spec import CapacitySpec
from autotune.core.workload.profiles import get_profile
from autotune.core.workload.requests import RandomPrompts
from autotune.shell.client import Target, run_profile
from autotune.shell.modelgen import make_model
from autotune.shell.server import DeploymentSpec, ServerProcess

Measure = Callable[[float, str], dict[str, float]]


def linear_descent(spec: CapacitySpec, measure: Measure) -> tuple[float | None, float | None, int]:
    probes, load, missed = 0, spec.high, None
    while load >= spec.low:
        probes += 1
        if all(lim.margin(measure(load, "linear")[lim.metric]) <= 0 for lim in spec.limits):
            return load, missed, probes
        missed, load = load, load - 1
    return None, missed, probes


def uniform_scan(spec: CapacitySpec, measure: Measure, step: int) -> tuple[float | None, float | None, int]:
    met, missed, probes = None, None, 0
    for load in range(step, int(spec.high) + 1, step):
        probes += 1
        if all(lim.margin(measure(float(load), "scan")[lim.metric]) <= 0 for lim in spec.limits):
            met = float(load) if missed is None else met
        elif missed is None:
            missed = float(load)
    return met, missed, probes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slo", default="p99_tpot_ms<=10")
    ap.add_argument("--low", type=float, default=1)
    ap.add_argument("--high", type=float, default=64)
    ap.add_argument("--scan-step", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    args = ap.parse_args()
    console = Console()
    limit = parse_limit(args.slo, f"--slo {args.slo!r}")
    spec = CapacitySpec(low=args.low, high=args.high, limits=(limit,))
    profile = dataclasses.replace(get_profile("capacity"), num_prompts=args.num_prompts,
                                  input_len=args.input_len, output_len=args.output_len,
                                  capacity=spec)
    slo = goodput_limits(spec)
    work = Path(tempfile.mkdtemp(prefix="capacity-bench-"))
    info = make_model(work / "model", kind="moe", mtp=True, seed=0)
    model = info.name
    dep_spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "1",
                                                    "--max-model-len", "4096"),
                              slot=Slot("cpu", (0,), 1), log_path=work / "server.log")
    rows = []
    with ServerProcess(dep_spec) as dep:
        target = Target(url=dep.url, model=dep.model_name, api_key=dep.api_key)
        seed = 0

        def measure(load: float, why: str) -> dict[str, float]:
            nonlocal seed
            seed += 1
            return flat_metrics(run_profile(target, profile.at_load(load), seed=seed,
                                            source=RandomPrompts(info.vocab_size), slo=slo).summary)

        measure(8, "warm-up")  # the first runs after start are slower; not counted
        for r in range(1, args.rounds + 1):
            methods = {
                "autotune (bracket + bisect)": lambda: _ends(search("capacity", spec, measure)),
                "linear descent (auto_tune.sh)": lambda: linear_descent(spec, measure),
                f"uniform scan, step {args.scan_step} (bench sweep)":
                    lambda: uniform_scan(spec, measure, args.scan_step),
            }
            order = list(methods.items())
            order = order[r - 1:] + order[:r - 1]  # rotate: no method always runs first
            for name, run in order:
                t0 = time.monotonic()
                met, missed, probes = run()
                rows.append((r, name, probes, time.monotonic() - t0, met, missed))
                console.print(f"round {r} {name}: {probes} probes, {rows[-1][3]:.0f} s, "
                              f"met {met}, missed {missed}")
    table = Table(title=f"finding the highest max concurrency with {args.slo} in "
                        f"[{args.low:g}, {args.high:g}] on one deployment")
    for col in ("round", "method", "probes", "seconds", "met at", "missed at"):
        table.add_column(col, justify="right" if col not in ("method",) else "left")
    for r, name, probes, secs, met, missed in sorted(rows, key=lambda x: (x[1], x[0])):
        table.add_row(str(r), name, str(probes), f"{secs:.0f}", f"{met:g}" if met else "-",
                      f"{missed:g}" if missed else "-")
    console.print(table)


def _ends(found) -> tuple[float | None, float | None, int]:
    return found.boundary.load, found.boundary.fail_load, len(found.probes)


if __name__ == "__main__":
    main()
