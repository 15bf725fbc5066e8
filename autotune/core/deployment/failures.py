"""Failure classes as a registry of records, and the classification of a vLLM server's exit
status and log text into them. Pure: no process, file or printing.

Every fact about a class is in its ``FailureClass`` record; the patterns come from failures seen
on real servers (vLLM's CPU build and an H200). ``failure_table`` renders the registry for
docs/deployments.md#failure-classes."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FailureClass:
    """Why a deployment or trial failed; its ``name`` is stored with every failed trial.
    ``blames_configuration``: the configuration caused it, so it is infeasible (the sampler
    learns to avoid it, and a later draw of the same flags is not deployed again); otherwise
    the machine or autotune failed, the trial is run once more, and a second such failure
    stops the study."""

    name: str
    seen_as: str  # how vLLM's output (or autotune) shows it
    blames_configuration: bool
    remedy: str  # what the user can do
    pattern: re.Pattern[str] | None = None  # log lines that show it, where the log does

    def shown_in(self, log_text: str) -> bool:
        """Whether the log shows this class (never, for a class without a pattern)."""
        return self.pattern is not None and self.pattern.search(log_text) is not None


CONFIG_REJECTED = FailureClass(
    "config_rejected", "argparse or pydantic config error (exit 2, or a `Value error, ...`)",
    True, "drop the flag or value from the search space, or restrict it with `applies_to`",
    re.compile(r"error: (argument|unrecognized arguments|the following arguments)|"
               r"pydantic_core\._pydantic_core\.ValidationError|validation errors? for |"
               r"Value error, |invalid choice: "))
OUT_OF_MEMORY = FailureClass(
    "out_of_memory", "allocator or KV-cache sizing errors, or the process killed by SIGKILL",
    True, "lower `--max-model-len`, `--max-num-seqs` or `--gpu-memory-utilization` in the space",
    re.compile(r"out of memory|OutOfMemoryError|Cannot allocate memory|"
               r"No available memory for the cache blocks|Insufficient memory|"
               r"larger than the available KV cache memory|MemoryError", re.IGNORECASE))
STARTUP_CRASH = FailureClass(
    "startup_crash", "any other exit before ready, or a worker that failed to initialize (vLLM "
    "may hang after it; autotune stops waiting after 15 s)",
    True, "read the log tail in the report's failures or the trial's server.log; report a crash vLLM should not have",
    re.compile(r"WorkerProc initialization failed|Engine core initialization failed|"
               r"WorkerProc hit an exception"))
STARTUP_TIMEOUT = FailureClass(
    "startup_timeout", "not ready within `--startup-timeout`", True,
    "raise `--startup-timeout` if start-up (compilation, CUDA graphs) is just slow")
ENGINE_DIED = FailureClass(
    "engine_died", "the engine or a worker died after `/health` was 200 (requests get HTTP 500)",
    True, "read the trial's log tail; the flags combine into a state vLLM cannot serve",
    re.compile(r"EngineDeadError|EngineCore encountered an issue|Engine core proc .* died|"
               r"died unexpectedly|Worker proc .* died|WorkerProc hit an exception|exit code -11|"
               r"Segmentation fault|SIGSEGV"))
BENCHMARK_INVALID = FailureClass(
    "benchmark_invalid", "some requests failed while the server kept serving", True,
    "read the benchmark JSONs among the trial's artifacts for the requests' errors")
SLO_VIOLATED = FailureClass(
    "slo_violated", "served and measured, but past an SLO limit", True,
    "none needed: the configuration does not meet your SLOs")
INTERRUPTED = FailureClass(
    "interrupted", "Ctrl-C during the trial", False,
    "run the same command again: the study resumes")
HOST_FAULT = FailureClass(
    "host_fault", "the machine failed the trial: disk full, port taken, a file that cannot be "
    "written (an `OSError`)", False,
    "free the disk or port the message names, then run the same command again",
    re.compile(r"Address already in use|No space left on device|\[Errno (?:28|98)\]"))
INTERNAL_ERROR = FailureClass(
    "internal_error", "a bug of autotune's (its exception is the message)", False,
    "report it with the message; run the same command again to resume")

FAILURE_CLASSES: dict[str, FailureClass] = {f.name: f for f in (
    CONFIG_REJECTED, OUT_OF_MEMORY, STARTUP_CRASH, STARTUP_TIMEOUT, ENGINE_DIED,
    BENCHMARK_INVALID, SLO_VIOLATED, INTERRUPTED, HOST_FAULT, INTERNAL_ERROR)}


def failure_class(name: str) -> FailureClass:
    """The registered class named ``name`` (as stored with a trial)."""
    try:
        return FAILURE_CLASSES[name]
    except KeyError:
        raise ValueError(f"failure class {name!r}: valid: {', '.join(FAILURE_CLASSES)}") from None


def failure_table() -> str:
    """The registry as a Markdown table (the failure classes of docs/deployments.md)."""
    rows = ["| class | seen as | the configuration | what you can do |", "|---|---|---|---|"]
    for f in FAILURE_CLASSES.values():
        held = "infeasible, not deployed again" if f.blames_configuration else \
            "not held against it: run once more, a second such failure stops the study"
        rows.append(f"| `{f.name}` | {f.seen_as} | {held} | {f.remedy} |")
    return "\n".join(rows)


_MESSAGE = re.compile(
    r"(?:^|\s)(?:\w+\.)*(\w*(?:Error|Exception)):\s*(.+)$|(error: .+)$|(Value error, .+)$"
)


@dataclass(frozen=True)
class Diagnosis:
    """A failure class and the most telling line vLLM printed about it."""

    failure: FailureClass
    failure_message: str


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
    if HOST_FAULT.shown_in(log_text):
        failure = HOST_FAULT
    elif returncode == 2 or CONFIG_REJECTED.shown_in(log_text):
        failure = CONFIG_REJECTED
    elif OUT_OF_MEMORY.shown_in(log_text) or returncode in (-9, 137):
        failure = OUT_OF_MEMORY
    else:
        failure = STARTUP_CRASH
        if engine_died(log_text):  # a worker died while the engine warmed up
            return Diagnosis(failure, engine_death_message(log_text))
    return Diagnosis(failure, vllm_message(log_text))


def startup_failed(log_text: str) -> bool:
    """Whether the log shows a fatal error during start-up (the server may hang after it)."""
    return STARTUP_CRASH.shown_in(log_text)


def engine_died(log_text: str) -> bool:
    """Whether the log says the engine or one of its workers died."""
    return ENGINE_DIED.shown_in(log_text)


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


def first_line(message: str, width: int) -> str:
    """A failure message's first line for one-line summaries: whole where it has at most
    ``width`` characters, else cut at the last space before ``width`` and closed with '...'
    (never mid-word: a cut word reads as another name, 'max_position_em')."""
    line = (message.splitlines() or [""])[0].strip()
    if len(line) <= width:
        return line
    cut = line[:width - 3].rsplit(" ", 1)[0] if " " in line[:width - 3] else line[:width - 3]
    return cut.rstrip(" ,;:(") + "..."
