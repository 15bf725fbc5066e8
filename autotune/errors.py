"""The one exception tree of autotune. Nothing here touches processes or the network.

    AutotuneError                 base: every error a user can act on
    ├── ConfigError               bad input found before anything runs (CLI flag, YAML file,
    │   │                         model folder, storage URL); the CLI exits 2
    │   └── SpaceError            a search space or reference file is malformed
    ├── ValidationError           vLLM's own parser rejected a flag set (no server started)
    ├── ValidationUnavailable     the installed vLLM's parser cannot be found or imported (not a
    │                             rejection: the flags are then checked by deploying them)
    ├── DeploymentError           a vLLM server did not come up or died; carries its failure
    │                             class (core.deployment.failures) and the log tail
    ├── BenchmarkError            a benchmark could not run at all (not: some requests failed,
    │                             which is data in the benchmark record)
    └── StudyError                the study cannot go on: its storage or state is unusable, or
                                  a trial failed twice for a reason not of its configuration

Messages say what was expected, what was found, and how to fix it.
"""

from __future__ import annotations

from typing import Any


class AutotuneError(Exception):
    """Base class: an error whose message a user can act on."""


class ConfigError(AutotuneError):
    """Raised for bad input (flag, file, field) before anything is launched."""


class SpaceError(ConfigError):
    """Raised when a search-space or reference-config file is malformed."""


class ValidationError(AutotuneError):
    """Raised when vLLM's own argument parser or engine checks reject a flag set."""


class ValidationUnavailable(AutotuneError):
    """Raised when the installed vLLM has no argument parser where autotune looks for one;
    flags are then checked by deploying them."""


class DeploymentError(AutotuneError):
    """Raised when a vLLM server fails to start, to become ready, or dies while serving."""

    # ``failure`` is a ``core.deployment.failures.FailureClass``: this module sits below the
    # core and cannot name the type.
    def __init__(self, failure: Any, message: str, *, log_tail: str = "") -> None:
        super().__init__(f"{failure.name}: {message}")
        self.failure = failure
        self.failure_message = message
        self.log_tail = log_tail


class BenchmarkError(AutotuneError):
    """Raised when a benchmark cannot run at all (bad profile, unreachable server)."""


class StudyError(AutotuneError):
    """Raised when the study cannot go on: its storage or state cannot be used, or a trial
    failed twice for a reason that is not its configuration's (the machine's or ours)."""
