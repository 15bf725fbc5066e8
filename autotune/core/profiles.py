"""Workload profiles: the load a benchmark puts on a server. Pure values, defined in one place.

The two built-in profiles are the reference study's (``../shared/reference/seed-study.md``):
512 random prompt tokens, 256 output tokens with EOS ignored, temperature 0, 100 requests,
at max concurrency 2 (interactive use) or 100 (a shared service).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from autotune.errors import ConfigError


@dataclass(frozen=True)
class WorkloadProfile:
    """One workload: what is sent, how much of it, and at which concurrency and rate."""

    name: str
    input_len: int = 512
    output_len: int = 256
    num_prompts: int = 100
    max_concurrency: int = 2
    request_rate: float = math.inf  # requests/s; inf sends as fast as concurrency allows
    burstiness: float = 1.0  # gamma shape of the arrival process; 1.0 is Poisson
    temperature: float = 0.0
    warmup_requests: int = 2  # sent before the measured run, never counted
    timeout_s: float = 600.0  # limit for the whole measured run

    def __post_init__(self) -> None:
        for field in ("input_len", "output_len", "num_prompts", "max_concurrency"):
            if getattr(self, field) < 1:
                raise ConfigError(
                    f"profile {self.name!r}: {field} must be >= 1, got {getattr(self, field)}"
                )
        if self.request_rate <= 0 or self.burstiness <= 0:
            raise ConfigError(
                f"profile {self.name!r}: request_rate and burstiness must be > 0"
            )
        if self.warmup_requests < 0 or self.timeout_s <= 0:
            raise ConfigError(
                f"profile {self.name!r}: warmup_requests must be >= 0 and timeout_s > 0"
            )


PROFILES: dict[str, WorkloadProfile] = {
    "low-concurrency": WorkloadProfile(name="low-concurrency", max_concurrency=2),
    "high-concurrency": WorkloadProfile(
        name="high-concurrency", max_concurrency=100, warmup_requests=4
    ),
}


@dataclass(frozen=True)
class ProfileOverrides:
    """Shrinks a profile for a quick look (`--num-prompts`, `--input-len`, ...). None keeps."""

    num_prompts: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    max_concurrency: int | None = None
    request_rate: float | None = None
    burstiness: float | None = None
    warmup_requests: int | None = None
    timeout_s: float | None = None


def get_profile(name: str, overrides: ProfileOverrides | None = None) -> WorkloadProfile:
    """The named built-in profile with ``overrides`` applied."""
    if name not in PROFILES:
        valid = ", ".join(PROFILES)
        raise ConfigError(f"--profile {name!r}: unknown profile; valid: {valid}")
    profile = PROFILES[name]
    if overrides is None:
        return profile
    changes = {k: v for k, v in dataclasses.asdict(overrides).items() if v is not None}
    return dataclasses.replace(profile, **changes)
