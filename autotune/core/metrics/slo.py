"""Service-level objectives: one record for a limit on a metric, with its parsers. Pure.

An SLO bounds one metric of one run (a registered metric key): ``p99_ttft_ms<=2000``. Named
with a profile (``high-concurrency:p99_ttft_ms<=5000``, from ``--slo``) it is a constraint of
a study on that profile's mean; without one it belongs to a capacity profile, whose search
holds every run at a load to it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autotune.core.metrics.registry import metric, unit_of
from autotune.errors import ConfigError

_LIMIT = re.compile(r"^\s*(\w+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")
_ON_PROFILE = re.compile(r"^\s*([\w.-]+):(.+)$")


@dataclass(frozen=True)
class Slo:
    """``metric op limit`` (op ``<=`` or ``>=``), on ``profile`` ("": a capacity profile's own)."""

    metric: str
    op: str
    limit: float
    profile: str = ""

    @property
    def text(self) -> str:
        """``p99_ttft_ms<=2000``."""
        return f"{self.metric}{self.op}{self.limit:g}"

    @property
    def key(self) -> str:
        """``high-concurrency:p99_ttft_ms<=2000`` (the constraint's name in a study)."""
        return f"{self.profile}:{self.text}" if self.profile else self.text

    def on(self, profile: str) -> Slo:
        return replace(self, profile=profile)

    def violation(self, value: float) -> float:
        """How far ``value`` is past the limit (<= 0 means met)."""
        return value - self.limit if self.op == "<=" else self.limit - value

    def margin(self, value: float) -> float:
        """log(value / limit) with the sign that makes > 0 mean past the limit."""
        past = math.log(max(value, 1e-9) / self.limit)
        return past if self.op == "<=" else -past


def parse_limit(text: str, where: str) -> Slo:
    """``METRIC<=LIMIT`` or ``>=``; a one-line ConfigError starting with ``where`` (the flag or
    file field and the text given) otherwise."""
    m = _LIMIT.match(text)
    if not m:
        raise ConfigError(f"{where}: expected METRIC<=LIMIT, e.g. 'p99_ttft_ms<=2000'")
    key, op = m.group(1), m.group(2)
    metric(key, where)
    try:
        limit = float(m.group(3))
    except ValueError:
        raise ConfigError(f"{where}: limit {m.group(3)!r} is not a number") from None
    if not math.isfinite(limit) or limit <= 0:
        raise ConfigError(f"{where}: the limit must be a positive number of {unit_of(key)}, "
                          f"got {m.group(3)}")
    return Slo(key, op, limit)


def parse_slo(text: str, profiles: Sequence[str]) -> Slo:
    """``PROFILE:METRIC<=LIMIT`` or ``>=``; a one-line error naming --slo otherwise."""
    m = _ON_PROFILE.match(text)
    if not m:
        raise ConfigError(
            f"--slo {text!r}: expected PROFILE:METRIC<=LIMIT, e.g. 'high-concurrency:p99_ttft_ms<=5000'"
        )
    profile = m.group(1)
    if profile not in profiles:
        raise ConfigError(f"--slo {text!r}: profile {profile!r} is not run; run: {list(profiles)}")
    return parse_limit(m.group(2), f"--slo {text!r}").on(profile)
