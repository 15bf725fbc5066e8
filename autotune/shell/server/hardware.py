"""A one-line description of the machine a trial ran on: CPU model and count, GPU names where
nvidia-smi answers. Stored with every trial, so numbers from different machines are never
compared unknowingly."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from pathlib import Path


@functools.cache
def hardware_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{os.cpu_count()} x {cpu}"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10, check=False)
            gpus = [g.strip() for g in out.stdout.splitlines() if g.strip()]
            if gpus:
                text += f"; {len(gpus)} x {gpus[0]}"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return text
