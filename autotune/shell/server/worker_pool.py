"""Parallel slots on one node: one `autotune worker` process per slot, all on one study.
Each worker is its own process (its own client, so that clients never share a GIL; its own
server pinned to the slot's GPUs or cores), coordinating only through the storage, as workers
on several nodes do. The storage URL reaches them through ``env``, never argv. A worker dies
with this process (PR_SET_PDEATHSIG), and its server with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from autotune.core.deployment.slots import Slot
from autotune.core.maths.platforms import CPU, GPU
from autotune.shell.server.processes import die_with_parent

STOP_GRACE_S = 30.0  # a worker told to stop tears its server down (SIGTERM grace 20 s)


def worker_argv(workdir: Path, study: str, slot: Slot, label: str,
                options: Sequence[str]) -> list[str]:
    flag = "--gpus" if slot.kind == GPU else "--cores"
    argv = [sys.executable, "-m", "autotune", "--workdir", str(workdir), "worker", "--study",
            study, flag, ",".join(map(str, slot.devices)), "--worker-label", label]
    if slot.kind == CPU:
        argv += ["--cores-per-rank", str(len(slot.devices) // slot.tensor_parallel_size),
                 "--kv-cache-gib", f"{slot.kv_cache_gib:g}"]
    return [*argv, *options]


def worker_options(model: str, *, heartbeat: tuple[int, int, int], entrypoint: str | None,
                   preimport: bool) -> list[str]:
    """The flags every slot's worker process gets from `run` or a multi-slot `worker`: the
    model, the heartbeat (interval, grace period, retries), how vLLM starts, no table."""
    interval, grace, retries = heartbeat
    options = ["--model", model, "--heartbeat-interval", str(interval), "--grace-period",
               str(grace), "--max-retry", str(retries)]
    if entrypoint:
        options += ["--entrypoint", entrypoint]
    if not preimport:
        options.append("--no-preimport")
    return [*options, "--no-table"]  # the storage URL goes by $AUTOTUNE_STORAGE, never argv


def run_workers(slots: Sequence[Slot], *, workdir: Path, study: str, env: Mapping[str, str],
                label: str, options: Sequence[str], message: Callable[[str], None]) -> int:
    """Start one worker per slot, with ``env`` added to this environment (the storage URL), and
    wait for all; returns 0, 1 (a worker failed) or 130. Workers are labelled
    ``<label>/slot<i>`` (their sampler seeds differ by label)."""
    env = {**os.environ, **env}
    procs: list[subprocess.Popen] = []
    names = [f"{label}/slot{i}" if label else f"slot{i}" for i in range(len(slots))]
    for name, slot in zip(names, slots, strict=True):
        argv = worker_argv(workdir, study, slot, name, options)
        procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                      preexec_fn=die_with_parent))  # noqa: PLW1509
        message(f"worker {name} on {slot.devices_text()}: pid {procs[-1].pid}")
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:
        _stop(procs)
        return 130
    failed = [i for i, code in enumerate(codes) if code != 0]
    for i in failed:
        message(f"worker {names[i]} exited with {codes[i]}")
    return 130 if any(c == 130 for c in codes) else (1 if failed else 0)


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    """Tell every worker to stop (a Ctrl-C may have reached them already: a worker's teardown
    holds further signals until its server is gone), wait, then kill."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
