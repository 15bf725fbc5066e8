"""Objectives and SLO constraints of a study, as records. Pure.

The default pair spans profiles: at one concurrency, throughput x mean E2EL is about c x L x 1000
for every configuration (one curve, not a trade-off); the trade-off is latency with few users
against throughput with many (one profile: TTFT against TPOT). An SLO is a constraint, met at
<= 0 (docs/studies.md#objectives)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.core.metrics.registry import label_of, metric, unit_of
from autotune.core.metrics.slo import Slo, parse_slo
from autotune.core.workload.profiles import WorkloadProfile
from autotune.errors import ConfigError

DIRECTIONS = {"min": "minimize", "max": "maximize", "minimize": "minimize", "maximize": "maximize"}


@dataclass(frozen=True)
class Objective:
    """One optimized metric of one profile."""

    profile: str
    metric: str
    direction: str  # "minimize" | "maximize"

    @property
    def name(self) -> str:
        return f"{self.profile}:{self.metric}"

    @property
    def unit(self) -> str:
        return unit_of(self.metric)

    @property
    def minimize(self) -> bool:
        return self.direction == "minimize"

    @property
    def infeasible_value(self) -> float:
        """The value of a trial that served nothing: unbounded latency, no throughput."""
        return math.inf if self.minimize else 0.0

    def cost(self, value: float) -> float:
        """``value`` turned into a quantity to minimize (for dominance and the knee)."""
        return value if self.minimize else -value

    @property
    def label(self) -> str:
        """For axes and table headers: 'mean E2EL at low-concurrency (ms)'."""
        return f"{label_of(self.metric)} at {self.profile} ({self.unit})"


def parse_objective(text: str, profiles: Sequence[str]) -> Objective:
    """``PROFILE:METRIC[:min|max]``; a one-line error naming --objective otherwise."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise ConfigError(f"--objective {text!r}: expected PROFILE:METRIC[:min|max], "
                          "e.g. 'low-concurrency:p99_ttft_ms:min'")
    profile, key = parts[0], parts[1]
    if profile not in profiles:
        raise ConfigError(f"--objective {text!r}: profile {profile!r} is not run; run: {list(profiles)}")
    known = metric(key, f"--objective {text!r}")
    direction = DIRECTIONS.get(parts[2]) if len(parts) == 3 else known.direction
    if direction is None:
        raise ConfigError(f"--objective {text!r}: direction {parts[2]!r} is not min or max")
    return Objective(profile, key, direction)


def default_objectives(profiles: Sequence[WorkloadProfile]) -> tuple[Objective, ...]:
    """Interactive latency against throughput under load: mean E2EL at the profile with the
    lowest concurrency, output throughput at the one with the highest (the first and the
    last profile when they tie). With one profile: mean TTFT against mean TPOT. With capacity
    profiles: mean E2EL at the lowest-concurrency fixed profile against the output throughput
    each capacity profile sustains within its SLOs (that alone without a fixed profile)."""
    if not profiles:
        raise ConfigError("--profile: at least one profile is needed")
    capacity = [p for p in profiles if p.capacity is not None]
    if capacity:
        carried = tuple(Objective(p.name, "output_throughput", "maximize") for p in capacity)
        fixed = [p for p in profiles if p.capacity is None]
        if not fixed:
            return carried
        low = min(fixed, key=lambda p: p.max_concurrency)
        return (Objective(low.name, "mean_e2el_ms", "minimize"), *carried)
    if len(profiles) == 1:
        name = profiles[0].name
        return (Objective(name, "mean_ttft_ms", "minimize"),
                Objective(name, "mean_tpot_ms", "minimize"))
    low = min(profiles, key=lambda p: p.max_concurrency)
    high = max(reversed(profiles), key=lambda p: p.max_concurrency)
    if low is high:
        low, high = profiles[0], profiles[-1]
    return (Objective(low.name, "mean_e2el_ms", "minimize"),
            Objective(high.name, "output_throughput", "maximize"))


def objective_values(objectives: Sequence[Objective],
                     means: Mapping[str, Mapping[str, float]]) -> list[float]:
    """Objective values from per-profile metric means."""
    return [float(means[o.profile][o.metric]) for o in objectives]


def split_slos(texts: Sequence[str], profiles: Sequence[WorkloadProfile]
               ) -> tuple[tuple[Slo, ...], dict[str, tuple[Slo, ...]]]:
    """``--slo`` flags into constraints on fixed profiles and limits of capacity profiles. An
    SLO naming no profile belongs to the only capacity profile, or to the only profile."""
    names = [p.name for p in profiles]
    capacity = [p.name for p in profiles if p.capacity is not None]
    slos: list[Slo] = []
    limits: dict[str, list[Slo]] = {}
    for text in texts:
        if ":" not in text.split("<")[0].split(">")[0]:
            owners = capacity or names
            if len(owners) != 1:
                raise ConfigError(f"--slo {text!r}: name the profile it applies to, "
                                  f"e.g. '{names[-1]}:{text.strip()}'")
            text = f"{owners[0]}:{text.strip()}"
        slo = parse_slo(text, names)
        if slo.profile in capacity:
            limits.setdefault(slo.profile, []).append(slo.on(""))
        else:
            slos.append(slo)
    return tuple(slos), {p: tuple(v) for p, v in limits.items()}
