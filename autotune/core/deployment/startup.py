"""Where a deployment's start-up time goes, read from vLLM's log. Pure.

vLLM logs (at INFO, which every deployment asks for) how long the model took to initialize,
its weights to load, torch.compile to compile (or to load from its cache), the first
profiling/warm-up run, CUDA graph capture on GPUs, and the whole engine initialization. The
rest of the time to ready (process start, imports, the API server, the first completion) is
``other_s``. Each phase takes the slowest worker's figure (the ranks start in parallel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PHASES = {
    "model_init_s": re.compile(r"Initializing model took ([\d.]+) seconds"),
    "weights_s": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "compile_s": re.compile(r"torch\.compile took ([\d.]+) s in total"),
    "compile_graphs_s": re.compile(r"Compiling a graph for compile range .*? takes ([\d.]+) s"),
    "compile_loaded_s": re.compile(r"Directly load the compiled graph\(s\) .*? took ([\d.]+) s"),
    "warmup_s": re.compile(r"Initial profiling/warmup run took ([\d.]+) s"),
    "cuda_graphs_s": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    "engine_init_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}
_CACHE_HIT = ("Directly load AOT compilation", "Directly load the compiled graph")
_STAMP = re.compile(r"INFO \d\d-\d\d (\d\d):(\d\d):(\d\d)")
_CACHE_MISS = ("saved AOT compiled function", "Compiling a graph for compile range")


@dataclass(frozen=True)
class StartupPhases:
    """Seconds per start-up phase (0 where vLLM logged none) and whether torch.compile's cache
    served the compiled graphs ("hit"), was filled ("miss"), or the log does not say ("")."""

    model_init_s: float = 0.0
    weights_s: float = 0.0
    compile_s: float = 0.0
    warmup_s: float = 0.0
    cuda_graphs_s: float = 0.0
    engine_init_s: float = 0.0
    other_s: float = 0.0
    compile_cache: str = ""

    def as_dict(self) -> dict[str, float | str]:
        return {k: v for k, v in self.__dict__.items() if v}


def _slowest(pattern: re.Pattern[str], log: str) -> float:
    return max((float(m) for m in pattern.findall(log)), default=0.0)


def _stamp(line: str) -> int | None:
    m = _STAMP.search(line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3)) if m else None


def _aot_compile_s(log: str) -> float:
    """Where vLLM compiles ahead of time (the CPU build) it logs no duration: the seconds from
    the weights loaded to the compiled function saved or loaded, by the log's timestamps."""
    lines = log.splitlines()
    start = next((_stamp(x) for x in lines if "Loading weights took" in x), None)
    end = max((t for x in lines if ("AOT compil" in x) and (t := _stamp(x)) is not None), default=None)
    if start is None or end is None:
        return 0.0
    return float((end - start) % 86400)


def startup_phases(log: str, ready_s: float) -> StartupPhases:
    """The phases of a start-up that took ``ready_s`` seconds to ready, from its log."""
    found = {key: _slowest(pattern, log) for key, pattern in _PHASES.items()}
    # One worker's compile: vLLM's total where it logs one, else its graphs' own times (compiled
    # or loaded from the cache).
    per_worker = found["compile_graphs_s"] or found["compile_loaded_s"]
    compile_s = found["compile_s"] or per_worker or _aot_compile_s(log)
    cache = "hit" if any(s in log for s in _CACHE_HIT) else "miss" if any(
        s in log for s in _CACHE_MISS) else ""
    engine = found["engine_init_s"]
    inside = found["model_init_s"] + found["weights_s"]
    return StartupPhases(
        model_init_s=found["model_init_s"], weights_s=found["weights_s"], compile_s=compile_s,
        warmup_s=found["warmup_s"], cuda_graphs_s=found["cuda_graphs_s"], engine_init_s=engine,
        other_s=max(ready_s - engine - inside, 0.0) if engine or inside else 0.0,
        compile_cache=cache)
