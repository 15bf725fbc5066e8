"""GPU memory after teardown, read through NVML: run on a machine with NVIDIA GPUs.

vLLM's GPU build cannot be installed on the lent device machine (no network, and its wheels
exceed what can be carried), so a torch process holding GPU memory stands in for the server
here: started in its own session on the slot's GPUs, killed as autotune kills a server
(process group), then `autotune.shell.server.gpu.wait_released` must see the memory come back.

    python benchmarks/experiments/gpu_teardown_check.py [--gib 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from autotune.core.deployment.slots import make_slots
from autotune.shell.server.gpu import nvml_used_mib, wait_released

HOLDER = ("import torch, time; x = torch.empty(int({gib} * 2**30), dtype=torch.uint8, "
          "device='cuda'); torch.cuda.synchronize(); print('holding', flush=True); time.sleep(600)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=20.0)
    args = ap.parse_args()
    import pynvml

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    slot = make_slots("gpu", list(range(count)), 1)[0]
    gpus = list(slot.devices)
    baseline = nvml_used_mib(gpus)
    env = {**os.environ, **slot.env()}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(gib=args.gib)], env=env,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    held = nvml_used_mib(gpus)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    ok, after = wait_released(baseline, timeout_s=60)
    print(f"slot env: {slot.env()}")
    print("| GPU | baseline MiB | while held MiB | after teardown MiB | released |")
    print("|---|---|---|---|---|")
    for g in gpus:
        print(f"| {g} | {baseline[g]} | {held[g]} | {after[g]} | {ok} |")
    print(f"total {time.monotonic() - t0:.1f} s")
    sys.exit(0 if ok and held[gpus[0]] - baseline[gpus[0]] > args.gib * 1000 else 1)


if __name__ == "__main__":
    main()
