"""CUDA graph capture sized to a study's load: the largest batch its deployments are asked to
run and the space whose deployments all capture only up to it. Pure.

At concurrency C with k speculative tokens no batch exceeds C x (1 + k); capturing beyond it
(vLLM: up to 512) costs start-up seconds no run uses. Opt-in until the H200 shows the same
numbers with and without it: docs/startup.md#cuda-graph-capture-sized-to-the-studys-load."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from autotune.core.space.search_space import SearchSpace
from autotune.core.workload.profiles import WorkloadProfile
from autotune.errors import ConfigError

CAP_FLAG = "--max-cudagraph-capture-size"
_SPEC = "--speculative-config"


def speculative_tokens(space: SearchSpace) -> int:
    """The most speculative tokens any configuration of the space proposes per step."""
    fixed = space.deployment.flags.get(_SPEC)
    found = [int(fixed.get("num_speculative_tokens", 0))] if isinstance(fixed, dict) else []
    for p in space.parameters:
        if p.json is None or p.json.flag != _SPEC:
            continue
        if p.json.key == "num_speculative_tokens":
            found += [int(v) for v in p.choices if isinstance(v, (int, float))]
            found += [int(p.high)] if p.high is not None else []
        found.append(int(p.json.set.get("num_speculative_tokens", 0)))
    return max(found, default=0)


def graph_capture_cap(profiles: Sequence[WorkloadProfile], space: SearchSpace) -> int:
    """The highest concurrency the study runs x (1 + the most speculative tokens)."""
    loads = {p.name: p.load for p in profiles}
    unbounded = [name for name, load in loads.items() if math.isinf(load)]
    if unbounded:
        raise ConfigError(f"--cap-cuda-graphs: profile {unbounded[0]!r} sets no highest "
                          "concurrency (a request-rate load), so no capture size covers it; "
                          "leave the cap off")
    return int(max(loads.values())) * (1 + speculative_tokens(space))


def capped(space: SearchSpace, cap: int) -> SearchSpace:
    """The space with every deployment capturing CUDA graphs up to ``cap`` tokens."""
    if CAP_FLAG in space.deployment.flags or any(p.flag == CAP_FLAG for p in space.parameters):
        raise ConfigError(f"--cap-cuda-graphs: the space {space.path} sets {CAP_FLAG} itself; "
                          "drop one of the two")
    flags = {**space.deployment.flags, CAP_FLAG: cap}
    return dataclasses.replace(space, deployment=dataclasses.replace(space.deployment, flags=flags))
