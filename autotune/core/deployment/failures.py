"""Failure classification from a vLLM server's exit status and log text. Pure.

The patterns come from failures seen on real servers (``../shared/notes/vllm-on-cpu.md``):
argparse errors and pydantic config checks (configuration rejected), allocator and cache
sizing errors (out of memory), dead engine cores and workers (engine died).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.errors import FailureClass

_CONFIG = re.compile(
    r"error: (argument|unrecognized arguments|the following arguments)|"
    r"pydantic_core\._pydantic_core\.ValidationError|validation errors? for |"
    r"Value error, |invalid choice: ",
)
_OOM = re.compile(
    r"out of memory|OutOfMemoryError|Cannot allocate memory|"
    r"No available memory for the cache blocks|Insufficient memory|"
    r"larger than the available KV cache memory|MemoryError",
    re.IGNORECASE,
)
_ENGINE_DIED = re.compile(
    r"EngineDeadError|EngineCore encountered an issue|Engine core proc .* died|"
    r"died unexpectedly|Worker proc .* died|WorkerProc hit an exception|exit code -11|"
    r"Segmentation fault|SIGSEGV"
)
_MESSAGE = re.compile(
    r"(?:^|\s)(?:\w+\.)*(\w*(?:Error|Exception)):\s*(.+)$|(error: .+)$|(Value error, .+)$"
)


@dataclass(frozen=True)
class Diagnosis:
    """A failure class and the most telling line vLLM printed about it."""

    failure: FailureClass
    message: str


_WRAPPER = re.compile(r"root cause|See stack trace|in a background process|Failed core proc")
_PREFIX = re.compile(r"^\(\w+ pid=\d+\) (?:ERROR|WARNING|INFO) [\d-]+ [\d:]+ \[[^\]]+\] ")


def vllm_message(log_text: str) -> str:
    """vLLM's own words for a failure: the last error line that is not a generic wrapper
    ("See root cause above"), without the process/time prefix; else the last line."""
    lines = [_PREFIX.sub("", ln.strip()) for ln in log_text.splitlines() if ln.strip()]
    errors = [i for i, ln in enumerate(lines) if _MESSAGE.search(ln)]
    specific = [i for i in errors if not _WRAPPER.search(lines[i])]
    for candidates in (specific, errors, list(range(len(lines)))):
        if candidates:
            i = candidates[-1]
            if "validation error" in lines[i]:  # pydantic: the details follow on their own lines
                details = [ln for ln in lines[i + 1 : i + 7]
                           if not ln.startswith(("For further information", "Traceback"))]
                return " ".join([lines[i], *details])[:500]
            return lines[i][-500:]
    return "(empty log)"


def classify_startup_exit(returncode: int, log_text: str) -> Diagnosis:
    """Why a server exited before it became ready."""
    if returncode == 2 or _CONFIG.search(log_text):
        failure = FailureClass.CONFIG_REJECTED
    elif _OOM.search(log_text) or returncode in (-9, 137):
        failure = FailureClass.OUT_OF_MEMORY
    else:
        failure = FailureClass.STARTUP_CRASH
        if engine_died(log_text):  # a worker died while the engine warmed up
            return Diagnosis(failure, engine_death_message(log_text))
    return Diagnosis(failure, vllm_message(log_text))


_STARTUP_FATAL = re.compile(
    r"WorkerProc initialization failed|Engine core initialization failed|"
    r"WorkerProc hit an exception"
)


def startup_failed(log_text: str) -> bool:
    """Whether the log shows a fatal error during start-up (the server may hang after it)."""
    return bool(_STARTUP_FATAL.search(log_text))


def engine_died(log_text: str) -> bool:
    """Whether the log says the engine or one of its workers died."""
    return bool(_ENGINE_DIED.search(log_text))


_DEATH_CAUSE = re.compile(r"died unexpectedly|exit code:? -\d+|Segmentation fault|SIGSEGV|killed")


def engine_death_message(log_text: str) -> str:
    """The line that says which process died and how, else vLLM's last error line."""
    for line in log_text.splitlines():
        if _DEATH_CAUSE.search(line):
            return _PREFIX.sub("", line.strip())[-500:]
    return vllm_message(log_text)


def tail(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of a log."""
    return "\n".join(text.splitlines()[-lines:])
