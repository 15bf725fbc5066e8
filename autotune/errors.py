"""The one exception tree of autotune. Nothing here touches processes or the network.

    AutotuneError                 base: every error a user can act on
    ├── ConfigError               bad input found before anything runs (CLI flag, YAML file,
    │   │                         model folder, storage URL); the CLI exits 2
    │   └── SpaceError            a search space or reference file is malformed
    ├── ValidationError           vLLM's own parser rejected a flag set (no server started)
    │   └── ValidationUnavailable the installed vLLM's parser cannot be found (another version)
    ├── DeploymentError           a vLLM server did not come up or died; carries a
    │                             FailureClass and the log tail
    ├── BenchmarkError            a benchmark could not run at all (not: some requests failed,
    │                             which is data in the benchmark record)
    └── StudyError                the study storage or its state is unusable

Messages say what was expected, what was found, and how to fix it.
"""

from __future__ import annotations

from enum import StrEnum


class AutotuneError(Exception):
    """Base class: an error whose message a user can act on."""


class ConfigError(AutotuneError):
    """Raised for bad input (flag, file, field) before anything is launched."""


class SpaceError(ConfigError):
    """Raised when a search-space or reference-config file is malformed."""


class ValidationError(AutotuneError):
    """Raised when vLLM's own argument parser or engine checks reject a flag set."""


class ValidationUnavailable(ValidationError):
    """Raised when the installed vLLM has no argument parser where autotune looks for one;
    flags are then checked by deploying them."""


class FailureClass(StrEnum):
    """Why a deployment or trial failed; stored with every failed trial."""

    CONFIG_REJECTED = "config_rejected"
    STARTUP_CRASH = "startup_crash"
    STARTUP_TIMEOUT = "startup_timeout"
    OUT_OF_MEMORY = "out_of_memory"
    ENGINE_DIED = "engine_died"
    BENCHMARK_INVALID = "benchmark_invalid"
    SLO_VIOLATED = "slo_violated"  # served and measured, but past an SLO limit
    INTERRUPTED = "interrupted"
    INTERNAL_ERROR = "internal_error"  # a bug of autotune's; the trial is failed, not lost


class DeploymentError(AutotuneError):
    """Raised when a vLLM server fails to start, to become ready, or dies while serving."""

    def __init__(self, failure: FailureClass, message: str, *, log_tail: str = "") -> None:
        super().__init__(f"{failure.value}: {message}")
        self.failure = failure
        self.reason = message
        self.log_tail = log_tail


class BenchmarkError(AutotuneError):
    """Raised when a benchmark cannot run at all (bad profile, unreachable server)."""


class StudyError(AutotuneError):
    """Raised when the study storage or its state cannot be used."""
