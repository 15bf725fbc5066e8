"""Where a deployment's start-up goes, phase by phase (core.deployment.startup), and what the
API server's imports cost.

Deploys the generated dense model (TP=2 on the CPU build, as the README's main job does)
``--starts`` times in a row and prints, per start, each phase's seconds and share of the time
to ready, and the seconds no phase names. ``--fresh-caches`` points vLLM's cache and the
kernel caches (``shell.server.kernel_cache_env``) at an empty folder for the first start,
kept for the next ones (a repeat of one configuration); otherwise the machine's caches serve.
``--imports N`` instead times ``import vllm.entrypoints.openai.api_server`` N times in fresh
interpreters and lists the slowest modules of the last (``python -X importtime``). Each start
leaves its log and its stamped lines (``server-N.stamped.log``, as tests/data holds) in a
temporary folder it names.

    .venv/bin/python benchmarks/startup.py [--starts 1] [--fresh-caches] [--option=--flag ...]
    .venv/bin/python benchmarks/startup.py --gpus 0 --tp 1 --model DIR [--option=-O3 ...]  # a GPU
    .venv/bin/python benchmarks/startup.py --imports 3
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.core.deployment.slots import Slot  # noqa: E402
from autotune.core.deployment.startup import PHASES, stamped_text  # noqa: E402
from autotune.shell.modelgen import make_model  # noqa: E402
from autotune.shell.server import DeploymentSpec, ServerProcess  # noqa: E402

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
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--gpus", help="GPU ids, e.g. 0 (default: the CPU build on cores 0..tp-1)")
    ap.add_argument("--model", help="model folder (default: the generated dense model)")
    args = ap.parse_args()
    slot = (Slot("cuda", tuple(int(g) for g in args.gpus.split(",")), args.tp) if args.gpus
            else Slot("cpu", tuple(range(args.tp)), args.tp))
    if args.imports:
        imports(args.imports)
    else:
        starts(args.starts, args.fresh_caches, args.option, slot, args.model)


if __name__ == "__main__":
    main()
