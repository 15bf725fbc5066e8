"""Where a deployment's start-up goes, phase by phase (core.deployment.startup), and what the
API server's imports cost.

Deploys the generated dense model (TP=2 on the CPU build, as the README's main job does)
``--starts`` times in a row and prints, per start, each phase's seconds and share of the time
to ready, and the seconds no phase names. ``--fresh-caches`` points vLLM's cache and the
kernel caches (``shell.server.server.kernel_cache_env``) at an empty folder for the first start,
kept for the next ones (a repeat of one configuration); otherwise the machine's caches serve.
``--imports N`` instead times ``import vllm.entrypoints.openai.api_server`` N times in fresh
interpreters and lists the slowest modules of the last (``python -X importtime``). Each start
leaves its log and its stamped lines (``server-N.stamped.log``, as tests/data holds) in a
temporary folder it names.

    .venv/bin/python benchmarks/startup.py [--starts 1] [--fresh-caches] [--option=--flag ...]
    .venv/bin/python benchmarks/startup.py --gpus 0 --tp 1 --model DIR [--option=-O3 ...]  # a GPU
    .venv/bin/python benchmarks/startup.py --imports 3
    .venv/bin/python benchmarks/startup.py --pairs 3 --env-a VLLM_WORKER_MULTIPROC_METHOD=spawn \
        --env-b VLLM_WORKER_MULTIPROC_METHOD=fork
    .venv/bin/python benchmarks/startup.py --pairs 3 --preimported-b   # the pre-imported launcher

``--pairs N`` starts one configuration 2N times, alternating the environments ``--env-a`` and
``--env-b`` (A first in odd pairs, B first in even ones, so that a drift of the machine's load
falls on both; after one uncounted warm-up start of A that fills the compile caches), and
prints each start's ready time and phases, each pair's ratio B/A, and the geometric mean
ratio with its range and a 95% t interval over the pairs' log ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.deployment.slots import Slot  # noqa: E402
from autotune.core.deployment.startup import PHASES, stamped_text  # noqa: E402
from autotune.modelgen.checkpoints import make_model  # noqa: E402
from autotune.shell.server.server import DeploymentSpec, ServerProcess, preimported_launcher  # noqa: E402

IMPORT = "import vllm.entrypoints.openai.api_server"


def starts(count: int, fresh: bool, options: list[str], slot: Slot, model: str | None) -> None:
    root = Path(tempfile.mkdtemp(prefix="startup-"))
    model = model or make_model(root / "dense", kind="dense", seed=0).name
    env = (("VLLM_CACHE_ROOT", str(root / "vllm")), ("AUTOTUNE_CACHE_DIR", str(root / "kernels"))) \
        if fresh else ()
    rows = []
    for i in range(count):
        spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", str(slot.tensor_parallel_size),
                                                    *options),
                              slot=slot, log_path=root / f"server-{i}.log", extra_env=env)
        with ServerProcess(spec) as dep:
            ready, phases = dep.startup_s, dep.phases()
        assert phases is not None
        # The stamped lines, in the form tests/data/startup-cpu-tp2.log holds (parse_stamped).
        (root / f"server-{i}.stamped.log").write_text(stamped_text(dep.startup_lines()))
        rows.append((ready, phases))
    print(f"logs and stamped logs in {root}")
    print(f"| phase | {' | '.join(f'start {i + 1} s (%)' for i in range(count))} |")
    print(f"|---|{'---:|' * count}")
    for key, label in [(p.key, p.label) for p in PHASES] + [("unnamed_s", "**unnamed**")]:
        cells = [f"{getattr(p, key):.1f} ({100 * getattr(p, key) / ready:.0f}%)" for ready, p in rows]
        if any(getattr(p, key) for _, p in rows):
            print(f"| {label} | {' | '.join(cells)} |")
    print(f"| **ready** | {' | '.join(f'{ready:.1f}' for ready, _ in rows)} |")
    print(f"| compile cache | {' | '.join(p.compile_cache or '-' for _, p in rows)} |")
    grown = [", ".join(f"{name} +{mib:g}" for name, mib in p.cache_added_mib if mib) or "none" for _, p in rows]
    print(f"| caches grown, MiB | {' | '.join(grown)} |")


def pairs(count: int, env_a: list[str], env_b: list[str], options: list[str], slot: Slot,
          model: str | None, preimported_b: bool = False) -> None:
    root = Path(tempfile.mkdtemp(prefix="startup-pairs-"))
    model = model or make_model(root / "dense", kind="dense", seed=0).name
    # B's deployments forked from one launcher that imported vLLM before the first pair (a
    # study's first trial pays those imports once; its later ones are what B measures).
    launcher = preimported_launcher(None) if preimported_b else None
    if launcher is not None:
        assert launcher.warm(), launcher.failed
        print(f"launcher imported vLLM in {launcher.ready_s:.1f} s", flush=True)
    envs = {"A": tuple(tuple(e.split("=", 1)) for e in env_a),
            "B": tuple(tuple(e.split("=", 1)) for e in env_b)}
    ready: dict[str, list[float]] = {"A": [], "B": []}
    # A warm-up start first (A's environment, not counted): the first start of a configuration
    # compiles afresh, and would weigh on one side only.
    order = [(-1, "A")] + [(i, side) for i in range(count) for side in ("AB" if i % 2 == 0 else "BA")]
    for i, side in order:
        spec = DeploymentSpec(model=model, options=("--tensor-parallel-size",
                                                    str(slot.tensor_parallel_size), *options),
                              slot=slot, log_path=root / f"server-{i + 1}{side}.log", extra_env=envs[side],
                              launcher=launcher if side == "B" else None)
        with ServerProcess(spec) as dep:
            seconds, phases = dep.startup_s, dep.phases()
            assert dep.preimported == (side == "B" and launcher is not None), launcher and launcher.failed
        (root / f"server-{i + 1}{side}.stamped.log").write_text(stamped_text(dep.startup_lines()))
        if i >= 0:
            ready[side].append(seconds)
        named = ", ".join(f"{p.key[:-2]} {getattr(phases, p.key):.1f}" for p in PHASES
                          if phases and getattr(phases, p.key))
        print(f"pair {i + 1 if i >= 0 else 'warm-up'} {side} "
              f"({' '.join('='.join(e) for e in envs[side]) or 'as is'}): ready {seconds:.1f} s; "
              f"{named}; unnamed {phases.unnamed_s if phases else 0:.1f}", flush=True)
    if launcher is not None:
        launcher.close()
    logs = [math.log(b / a) for a, b in zip(ready["A"], ready["B"], strict=True)]
    ratios = [math.exp(x) for x in logs]
    mean = statistics.fmean(logs)
    half = (T95[len(logs) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
            if len(logs) > 1 else math.nan)
    print(f"logs in {root}")
    print(f"ready A: {', '.join(f'{x:.1f}' for x in ready['A'])} s; B: "
          f"{', '.join(f'{x:.1f}' for x in ready['B'])} s")
    print(f"ratio B/A per pair: {', '.join(f'{r:.3f}' for r in ratios)}; geometric mean "
          f"{math.exp(mean):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}, 95% interval "
          f"{math.exp(mean - half):.3f}-{math.exp(mean + half):.3f})")


T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def imports(count: int) -> None:
    walls = []
    for _ in range(count):
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", IMPORT], capture_output=True,
                              text=True, check=True, env=dict(os.environ))
        walls.append(time.monotonic() - t0)
    print("seconds to import the API server, fresh interpreters: "
          + ", ".join(f"{w:.1f}" for w in walls))
    rows = [re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line) for line in done.stderr.splitlines()]
    top = sorted((int(m.group(2)), len(m.group(3)), m.group(4)) for m in rows if m)[::-1]
    print("slowest modules of the last (cumulative s, depth):")
    for us, depth, name in [r for r in top if r[1] <= 7][:25]:
        print(f"  {us / 1e6:6.2f}  {depth // 2:2d}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=1)
    ap.add_argument("--fresh-caches", action="store_true")
    ap.add_argument("--option", action="append", default=[], help="a vLLM flag, e.g. --option=-O0")
    ap.add_argument("--imports", type=int, default=0)
    ap.add_argument("--pairs", type=int, default=0, help="interleaved starts of --env-a and --env-b")
    ap.add_argument("--env-a", action="append", default=[], help="VAR=VALUE for the A starts")
    ap.add_argument("--env-b", action="append", default=[], help="VAR=VALUE for the B starts")
    ap.add_argument("--preimported-b", action="store_true",
                    help="B starts forked from the pre-imported launcher (A: new processes)")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--gpus", help="GPU ids, e.g. 0 (default: the CPU build on cores 0..tp-1)")
    ap.add_argument("--model", help="model folder (default: the generated dense model)")
    args = ap.parse_args()
    slot = (Slot("gpu", tuple(int(g) for g in args.gpus.split(",")), args.tp) if args.gpus
            else Slot("cpu", tuple(range(args.tp)), args.tp))
    if args.imports:
        imports(args.imports)
    elif args.pairs:
        pairs(args.pairs, args.env_a, args.env_b, args.option, slot, args.model, args.preimported_b)
    else:
        starts(args.starts, args.fresh_caches, args.option, slot, args.model)


if __name__ == "__main__":
    main()
