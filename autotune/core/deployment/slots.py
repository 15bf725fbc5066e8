"""Device slots: which GPUs or CPU cores one deployment owns, and the environment that pins it.

Pure. A GPU slot becomes ``CUDA_VISIBLE_DEVICES``; a CPU slot (vLLM's CPU build) becomes
``VLLM_CPU_OMP_THREADS_BIND`` with one core range per tensor-parallel rank, as measured in
docs/deployments.md (TP=2 on two cores: ``0|1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.maths.platforms import CPU, GPU
from autotune.errors import ConfigError


@dataclass(frozen=True)
class Slot:
    """The devices of one deployment: GPU ids, or CPU cores split over TP ranks."""

    kind: str  # a platform: "gpu" or "cpu" (``platforms.PLATFORMS``)
    devices: tuple[int, ...]
    tensor_parallel_size: int = 1
    kv_cache_gib: float = 1.0  # CPU only: VLLM_CPU_KVCACHE_SPACE

    def env(self) -> dict[str, str]:
        """Environment variables that pin a vLLM server to this slot."""
        if self.kind == GPU:
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.devices))}
        per_rank = len(self.devices) // self.tensor_parallel_size
        ranks = [
            self.devices[i * per_rank : (i + 1) * per_rank]
            for i in range(self.tensor_parallel_size)
        ]
        bind = "|".join(_core_range(r) for r in ranks)
        return {
            "VLLM_CPU_OMP_THREADS_BIND": bind,
            "VLLM_CPU_KVCACHE_SPACE": f"{self.kv_cache_gib:g}",
        }

    def devices_text(self) -> str:
        label = "GPUs" if self.kind == GPU else "cores"
        return f"{label} {','.join(map(str, self.devices))}"


def _core_range(cores: Sequence[int]) -> str:
    if len(cores) > 1 and list(cores) == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def make_slots(
    kind: str, devices: Sequence[int], tensor_parallel_size: int, *, per_rank: int = 1,
    kv_cache_gib: float = 1.0,
) -> list[Slot]:
    """Split ``devices`` into as many disjoint slots of ``tensor_parallel_size`` ranks as fit.

    GPUs: one GPU per rank. CPU: ``per_rank`` cores per rank. Leftover devices stay unused.
    """
    if tensor_parallel_size < 1:
        raise ConfigError(f"--tp must be >= 1, got {tensor_parallel_size}")
    if len(set(devices)) != len(devices):
        raise ConfigError(f"device list {list(devices)} names a device twice")
    width = tensor_parallel_size * (per_rank if kind == CPU else 1)
    if len(devices) < width:
        label = "--gpus" if kind == GPU else "--cores"
        raise ConfigError(
            f"{label} {','.join(map(str, devices))}: tensor parallel {tensor_parallel_size} "
            f"needs {width} devices per deployment, got {len(devices)}"
        )
    return [
        Slot(kind, tuple(devices[i : i + width]), tensor_parallel_size, kv_cache_gib)
        for i in range(0, len(devices) - width + 1, width)
    ]


def parse_device_list(text: str, flag: str) -> list[int]:
    """``0,1,2`` or ``0-3`` into ids; a one-line error naming ``flag`` otherwise."""
    ids: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-")
                ids.extend(range(int(lo), int(hi) + 1))
            elif part.strip():
                ids.append(int(part))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected ids like '0,1,2,3' or '0-3'") from None
    if not ids or min(ids) < 0:
        raise ConfigError(f"{flag} {text!r}: expected ids like '0,1,2,3' or '0-3'")
    return ids


def slots_for(platform: str, tp: int, allowed: Sequence[int], *, gpus: str | None = None,
              cores: str | None = None, cores_per_rank: int = 1,
              kv_cache_gib: float = 1.0) -> list[Slot]:
    """The slots the device flags ask for: sets of ``tp`` GPUs from ``gpus`` (default the first
    ``tp``), or CPU core sets from ``cores`` (default one slot over every core of ``allowed``,
    the cores this process may use, split evenly between the ranks)."""
    if platform == GPU:
        if cores:
            raise ConfigError("--cores is for vLLM's CPU build; on GPUs use --gpus 0,1,...")
        return make_slots(GPU, parse_device_list(gpus, "--gpus") if gpus else list(range(tp)), tp)
    if gpus:
        raise ConfigError(f"--gpus {gpus}: this is vLLM's CPU build (no GPU); use --cores 0,1,...")
    if not cores:
        allowed = sorted(allowed)
        return make_slots(CPU, allowed, tp, per_rank=max(1, len(allowed) // tp),
                          kv_cache_gib=kv_cache_gib)[:1]
    ids = parse_device_list(cores, "--cores")
    if not set(ids) <= set(allowed):
        raise ConfigError(f"--cores {cores}: this process may use cores "
                          f"{','.join(map(str, sorted(allowed)))}")
    return make_slots(CPU, ids, tp, per_rank=cores_per_rank, kv_cache_gib=kv_cache_gib)
