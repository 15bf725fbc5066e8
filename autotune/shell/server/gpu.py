"""GPU memory through NVML (nvidia-ml-py, the ``gpu`` extra): was it given back after teardown?

A trial's server must leave its GPUs as it found them, or the next trial on the same pair
starts with less memory and measures something else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

Reader = Callable[[Sequence[int]], dict[int, int]]


def nvml_used_mib(indices: Sequence[int]) -> dict[int, int]:
    """Used memory in MiB of each physical GPU index, read through NVML."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return {i: pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used
                // 2**20 for i in indices}
    finally:
        pynvml.nvmlShutdown()


def nvml_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no library, no driver or no GPU: all mean "cannot read"
        return False
    return True


def released(baseline: Mapping[int, int], now: Mapping[int, int], tolerance_mib: int) -> bool:
    """Every GPU is back within ``tolerance_mib`` of its baseline."""
    return all(now[i] <= baseline[i] + tolerance_mib for i in baseline)


def wait_released(baseline: Mapping[int, int], *, read: Reader = nvml_used_mib,
                  timeout_s: float = 60.0, tolerance_mib: int = 512,
                  poll_s: float = 1.0) -> tuple[bool, dict[int, int]]:
    """Poll until the GPUs are back at their baseline; returns (released, last reading)."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = read(list(baseline))
        if released(baseline, now, tolerance_mib) or time.monotonic() > deadline:
            return released(baseline, now, tolerance_mib), now
        time.sleep(poll_s)
