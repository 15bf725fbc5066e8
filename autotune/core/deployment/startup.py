"""Where a deployment's start-up time goes: phases between named lines of vLLM's log, each
stamped by autotune as it arrived, and what no phase names. Pure: takes lines, returns records.

vLLM's own stamps are whole seconds, hence autotune's arrival stamps (``LogLine``). Where ranks
log in parallel a phase ends at the last matching line (the slowest rank). ``PHASES`` is the
registry: a new vLLM's messages are one edit away (docs/startup.md#what-each-trial-records)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

LAUNCH = "launch"  # autotune's event: the process was started (0 s)
READY = "ready"  # autotune's event: the first completion was answered


@dataclass(frozen=True)
class LogLine:
    """One line of the server's output and when autotune read it (seconds since launch)."""

    arrival_s: float
    text: str


@dataclass(frozen=True)
class Mark:
    """A named event: the first (or ``last``) line matching ``pattern``, only among the lines
    before the first one matching ``before`` and after the first one matching ``after`` where
    given. ``LAUNCH``/``READY`` as patterns are autotune's events."""

    pattern: str
    last: bool = False
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class StartupPhase:
    """One phase of a start-up: from the first of ``starts`` the log holds to the first of
    ``ends`` it holds (each tried in order)."""

    key: str  # StartupPhases field
    label: str  # for people: "compile"
    starts: tuple[Mark, ...]
    ends: tuple[Mark, ...]


_RECORD = r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d"  # a line of vLLM's logger
_API = r"\(APIServer pid="
_ENGINE = r"\(EngineCore"
_LOAD = r"Starting to load model"
_WEIGHTS = Mark(r"Loading weights took|Model loading took", last=True)
_COMPILED = Mark(r"saved AOT compiled function|Directly load AOT compilation|unable to save AOT "
                 r"compiled|torch\.compile (?:took|takes) [\d.]+ s in total|Directly load the compiled graph",
                 last=True)
_WARMED = Mark(r"Warming up done", last=True)  # the CPU build's warm-up run
_KV = r"Available KV cache memory|Explicitly set .* for KV cache|KV cache size: "
_JIT = r"Compile and warming up model for size"
_GRAPHS = r"Capturing CUDA graphs"
_GRAPHS_DONE = Mark(r"Graph capturing finished", last=True)
_ENGINE_READY = Mark(r"init engine \(profile, create kv cache, warmup model\) took", last=True)
# The API server listens: uvicorn's line after the application's start-up (the one matcher of it:
# the server's readiness poll and the phases both read this). Older uvicorns said only the second.
LISTENING = r"Application startup complete|Uvicorn running on"
# FlashInfer builds its kernels on a machine's first use (ninja and nvcc in the worker, into
# FLASHINFER_WORKSPACE_BASE, shared by every deployment): it logs "Loading JIT ops: NAME" and
# "Finished loading JIT ops: NAME", or only ninja's output, which the next log record ends.
_FLASHINFER = r"flashinfer\.jit: Loading JIT ops|ninja: Entering directory .*flashinfer"

PHASES: tuple[StartupPhase, ...] = (
    StartupPhase("imports_s", "imports", (Mark(LAUNCH),), (Mark(_RECORD),)),
    # The API server resolves the configuration (the model registry's import included) and
    # then spawns the engine: its last line before the engine's first ends it.
    StartupPhase("config_s", "config", (Mark(_RECORD),), (Mark(_API, last=True, before=_ENGINE),)),
    StartupPhase("engine_s", "engine", (Mark(_API, last=True, before=_ENGINE),), (Mark(_ENGINE),)),
    # Worker processes: spawn, imports, the distributed group, the device.
    StartupPhase("workers_s", "workers", (Mark(_ENGINE),), (Mark(_LOAD),)),
    StartupPhase("weights_s", "weights", (Mark(_LOAD),), (_WEIGHTS,)),
    # Older vLLMs announce no compile: their profiling run, which compiles, follows the weights.
    # The CPU build without AOT compilation (VLLM_USE_AOT_COMPILE=0, docs/startup.md) logs no
    # compile line: it compiles inside its warm-up run, which then ends the compile.
    StartupPhase("compile_s", "compile",
          (Mark(r"Warming up model for the compilation|Starting torch\.compile"), _WEIGHTS),
          (_COMPILED, _WARMED)),
    StartupPhase("warmup_s", "warm-up", (_COMPILED,),
          (_WARMED, Mark(r"Initial profiling/warmup run took", last=True), Mark(_KV))),
    # On a GPU machine's first start, after the profiling run: the sampler's kernels (top-p,
    # top-k) built by FlashInfer, minutes once, then loaded from the shared cache.
    StartupPhase("flashinfer_jit_s", "FlashInfer JIT", (Mark(_FLASHINFER),),
          (Mark(r"Finished loading JIT ops", last=True), Mark(_RECORD, after=_FLASHINFER))),
    StartupPhase("kv_cache_s", "KV cache", (Mark(_KV),),
          (Mark(_JIT), Mark(_GRAPHS), _ENGINE_READY)),
    StartupPhase("jit_s", "kernel JIT", (Mark(_JIT),), (Mark(_GRAPHS),)),
    StartupPhase("cuda_graphs_s", "CUDA graphs", (Mark(_GRAPHS),), (_GRAPHS_DONE,)),
    # After capture: the sampler's warm-up and inductor's lazy initialisation (kernels JIT-
    # compiled on a machine's first start), until the monitor of later JIT compiles is on.
    StartupPhase("after_graphs_s", "sampler JIT", (_GRAPHS_DONE,),
          (Mark(r"Kernel JIT monitor activated", last=True),)),
    StartupPhase("api_server_s", "API server", (_ENGINE_READY,), (Mark(LISTENING),)),
    StartupPhase("first_completion_s", "first completion", (Mark(LISTENING),), (Mark(READY),)),
)

_CACHE_HIT = ("Directly load AOT compilation", "Directly load the compiled graph")
_CACHE_MISS = ("saved AOT compiled function", "Compiling a graph for compile range")
_CACHE_UNLOADABLE = "Compiling model again due to a load failure"


@dataclass(frozen=True)
class StartupPhases:
    """Seconds per phase of one start-up (0 where the log names none), the seconds no phase
    covers, whether torch.compile's cache served the compiled graphs ("hit"), was filled
    ("miss"), held them but could not load them ("unloadable") or the log does not say (""),
    and how much each cache folder grew (a kernel cache that grew was filled: a miss; one that
    did not, served or was not used)."""

    imports_s: float = 0.0
    config_s: float = 0.0
    engine_s: float = 0.0
    workers_s: float = 0.0
    weights_s: float = 0.0
    compile_s: float = 0.0
    warmup_s: float = 0.0
    flashinfer_jit_s: float = 0.0
    kv_cache_s: float = 0.0
    jit_s: float = 0.0
    cuda_graphs_s: float = 0.0
    after_graphs_s: float = 0.0
    api_server_s: float = 0.0
    first_completion_s: float = 0.0
    unnamed_s: float = 0.0
    compile_cache: str = ""
    cache_added_mib: tuple[tuple[str, float], ...] = ()  # per cache folder, launch to ready
    launch: str = ""  # "preimported": forked with vLLM's imports done (its imports phase ~0)

    def as_dict(self) -> dict[str, float | str]:
        """Flat, for the trial record: every non-zero phase, the compile cache's hit or miss,
        and ``<cache>_cache_added_mib`` per cache folder."""
        out: dict[str, float | str] = {f.name: round(v, 3) if isinstance(v, float) else v
                                       for f in fields(self) if f.name != "cache_added_mib"
                                       and (v := getattr(self, f.name))}
        return out | {f"{name}_cache_added_mib": mib for name, mib in self.cache_added_mib}


def _when(mark: Mark, lines: Sequence[LogLine], ready_s: float) -> float | None:
    if mark.pattern == LAUNCH:
        return 0.0
    if mark.pattern == READY:
        return ready_s
    if mark.before:
        stop = next((i for i, x in enumerate(lines) if re.search(mark.before, x.text)), None)
        if stop is None:
            return None
        lines = lines[:stop]
    if mark.after:
        start = next((i for i, x in enumerate(lines) if re.search(mark.after, x.text)), None)
        if start is None:
            return None
        lines = lines[start + 1:]
    found = [x.arrival_s for x in lines if re.search(mark.pattern, x.text)]
    if not found:
        return None
    return found[-1] if mark.last else found[0]


def _first_found(marks: Iterable[Mark], lines: Sequence[LogLine], ready_s: float) -> float | None:
    return next((t for m in marks if (t := _when(m, lines, ready_s)) is not None), None)


def phase_spans(lines: Sequence[LogLine], ready_s: float) -> dict[str, tuple[float, float]]:
    """Each phase the log bounds: (start, end) in seconds since launch."""
    spans = {}
    for phase in PHASES:
        start = _first_found(phase.starts, lines, ready_s)
        end = _first_found(phase.ends, lines, ready_s)
        if start is not None and end is not None and end >= start:
            spans[phase.key] = (start, min(end, ready_s))
    return spans


def _covered_s(spans: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by the union of the spans (phases that overlap count once)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def compile_cache(lines: Iterable[LogLine]) -> str:
    """'hit' where vLLM loaded its compiled graphs, 'miss' where it compiled and saved them,
    'unloadable' where it found them but failed to load them and compiled again (vLLM 0.32's
    CPU build, every time: "'function' object has no attribute 'finalize_loading'")."""
    text = "\n".join(x.text for x in lines)
    if _CACHE_UNLOADABLE in text:
        return "unloadable"
    if any(s in text for s in _CACHE_HIT):
        return "hit"
    return "miss" if any(s in text for s in _CACHE_MISS) else ""


def startup_phases(lines: Sequence[LogLine], ready_s: float) -> StartupPhases:
    """The phases of a start-up that took ``ready_s`` seconds to ready, from its stamped lines
    (those read before ready)."""
    lines = [x for x in lines if x.arrival_s <= ready_s]
    spans = phase_spans(lines, ready_s)
    seconds = {key: end - start for key, (start, end) in spans.items()}
    return StartupPhases(**seconds, unnamed_s=max(ready_s - _covered_s(spans.values()), 0.0),
                         compile_cache=compile_cache(lines))


def stamped_text(lines: Iterable[LogLine]) -> str:
    """Lines as ``<seconds> <text>``, the form ``parse_stamped`` reads back."""
    return "".join(f"{x.arrival_s:10.3f} {x.text}\n" for x in lines)


def parse_stamped(text: str) -> list[LogLine]:
    """Lines written by ``stamped_text``."""
    out = []
    for row in text.splitlines():
        stamp, _, rest = row.strip(" ").partition(" ")
        out.append(LogLine(float(stamp), rest))
    return out
