"""What a warm torch.compile cache saves at start-up (CPU build, TP=2, the generated model).

Deploys one configuration ``--starts`` times with a fresh, empty vLLM cache folder
(``VLLM_CACHE_ROOT``) for the first start and the same folder afterwards, as consecutive trials
of a study share ``~/.cache/vllm``; prints each start's ready seconds and its phases as vLLM
logs them (``core.deployment.startup``): the first start compiles, the others should load.

    .venv/bin/python benchmarks/experiments/compile_cache.py [--starts 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from autotune.core.deployment.slots import Slot  # noqa: E402
from autotune.modelgen.checkpoints import make_model  # noqa: E402
from autotune.shell.server.server import DeploymentSpec, ServerProcess  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="compile-cache-"))
    model = make_model(root / "dense", kind="dense", seed=0).name
    cache = root / "vllm-cache"
    table = Table(title="one configuration started again and again, TP=2 on 2 cores")
    for col in ("start", "cache before", "ready s", "compile s", "workers s", "unnamed s", "log says"):
        table.add_column(col, justify="right")
    for i in range(args.starts):
        spec = DeploymentSpec(model=model, options=("--tensor-parallel-size", "2", "--max-model-len", "4096"),
                              slot=Slot("cpu", (0, 1), 2), log_path=root / f"server-{i}.log",
                              extra_env=(("VLLM_CACHE_ROOT", str(cache)),))
        before = "empty" if not cache.exists() else "warm"
        with ServerProcess(spec) as dep:
            ready, p = dep.startup_s, dep.phases()
        assert p is not None
        table.add_row(str(i + 1), before, f"{ready:.1f}", f"{p.compile_s:.1f}", f"{p.workers_s:.1f}",
                      f"{p.unnamed_s:.1f}", p.compile_cache or "-")
    Console().print(table)


if __name__ == "__main__":
    main()
