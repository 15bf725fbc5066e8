"""Objectives and SLO constraints of a study, per workload profile. Pure.

Every requested profile contributes two objectives: output throughput (tok/s, maximize) and
mean end-to-end latency (ms, minimize), named ``<profile>:<metric>`` so the dashboard and plots
label them. SLOs (``high-concurrency:p99_ttft_ms<=5000``) become constraints: a trial is
feasible when each violation (how far past the limit) is <= 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.errors import ConfigError

OBJECTIVES: tuple[tuple[str, str], ...] = (
    ("output_throughput", "maximize"),
    ("mean_e2el_ms", "minimize"),
)
UNITS = {"output_throughput": "tok/s", "mean_e2el_ms": "ms"}
# Metrics an SLO may name: the benchmark's keys, as vLLM's `bench serve` writes them.
KNOWN_METRICS = (
    "output_throughput", "request_throughput", "total_token_throughput",
    *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
      for s in ("mean", "median", "std", "p50", "p90", "p99")),
)


def metric_names(profiles: Sequence[str]) -> list[str]:
    return [f"{p}:{m}" for p in profiles for m, _ in OBJECTIVES]


def directions(profiles: Sequence[str]) -> list[str]:
    return [d for _ in profiles for _, d in OBJECTIVES]


def objective_values(
    means: Mapping[str, Mapping[str, float]], profiles: Sequence[str]
) -> list[float]:
    """Objective values in ``metric_names`` order from per-profile metric means."""
    return [float(means[p][m]) for p in profiles for m, _ in OBJECTIVES]


def infeasible_values(profiles: Sequence[str]) -> list[float]:
    """Values of a trial that served nothing: no throughput, unbounded latency."""
    return [0.0 if d == "maximize" else math.inf for d in directions(profiles)]


_SLO = re.compile(r"^\s*([\w.-]+):(\w+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Slo:
    """One service-level objective on a profile's metric (a vLLM benchmark key)."""

    profile: str
    metric: str
    op: str
    limit: float

    @property
    def key(self) -> str:
        return f"{self.profile}:{self.metric}{self.op}{self.limit:g}"

    def violation(self, value: float) -> float:
        """How far ``value`` is past the limit (<= 0 means met)."""
        return value - self.limit if self.op == "<=" else self.limit - value


def parse_slo(text: str, profiles: Sequence[str], known_metrics: Sequence[str]) -> Slo:
    """``PROFILE:METRIC<=LIMIT`` or ``>=``; a one-line error naming --slo otherwise."""
    m = _SLO.match(text)
    if not m:
        raise ConfigError(
            f"--slo {text!r}: expected PROFILE:METRIC<=LIMIT, e.g. 'high-concurrency:p99_ttft_ms<=5000'"
        )
    profile, metric, op, limit = m.group(1), m.group(2), m.group(3), float(m.group(4))
    if profile not in profiles:
        raise ConfigError(f"--slo {text!r}: profile {profile!r} is not run; run: {list(profiles)}")
    if metric not in known_metrics:
        raise ConfigError(
            f"--slo {text!r}: unknown metric {metric!r}; e.g. mean_ttft_ms, p99_ttft_ms, "
            "mean_tpot_ms, p99_e2el_ms, output_throughput"
        )
    return Slo(profile, metric, op, limit)
