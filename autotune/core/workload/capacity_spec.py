"""How a capacity profile searches its load axis: the load (concurrency or request rate), its
range and steps, and the SLO limits a load must meet. Pure; the search itself is
``autotune.core.trial.capacity_search``."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.core.metrics.slo import Slo
from autotune.errors import ConfigError

LOADS = ("concurrency", "rate")


@dataclass(frozen=True)
class CapacitySpec:
    """How a capacity profile searches its load axis."""

    load: str = "concurrency"  # "concurrency" (max concurrency) | "rate" (Poisson requests/s)
    low: float = 1.0
    high: float = 256.0
    start: float | None = None  # first probe; default: geometric mean of low and high
    factor: float = 4.0  # bracketing step
    resolution: float = 1.25  # done when fail load / pass load <= this
    max_probes: int = 12  # measured runs in all, repeats included
    max_repeats: int = 3  # runs at one load while its verdict is unsure
    noise: float = 0.15  # assumed log-sd of one run's SLO metric, until repeats measure it
    limits: tuple[Slo, ...] = ()

    def __post_init__(self) -> None:
        if self.load not in LOADS:
            raise ConfigError(f"capacity load {self.load!r}: valid: {', '.join(LOADS)}")
        if not 0 < self.low < self.high:
            raise ConfigError(f"capacity: need 0 < low < high, got low={self.low:g} high={self.high:g}")
        if self.factor <= 1 or self.resolution <= 1:
            raise ConfigError("capacity: factor and resolution must be > 1")
        if self.max_probes < 2 or self.max_repeats < 1 or self.noise <= 0:
            raise ConfigError("capacity: max_probes >= 2, max_repeats >= 1 and noise > 0 needed")

    @property
    def integer(self) -> bool:
        return self.load == "concurrency"

    @property
    def unit(self) -> str:
        return "concurrent requests" if self.integer else "req/s"

    def snap(self, load: float) -> float:
        load = min(max(load, self.low), self.high)
        return float(round(load)) if self.integer else float(f"{load:.3g}")

    @property
    def first(self) -> float:
        return self.snap(self.start if self.start is not None else math.sqrt(self.low * self.high))
