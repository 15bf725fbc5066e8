"""The exploration order: which configurations a study measures first after its baseline, and
why. Pure: values in, records out.

Each single change a prior expects to help (largest gain first), then per use the helpful
changes together; the sampler goes on from there. Chosen over sampling from the start by
replaying whole studies with GPU costs (docs/answers.md; docs/samplers.md#the-exploration-order-issue-46)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.core.space.search_space import (
    ModelContext,
    Params,
    SearchSpace,
    Value,
    complete,
    fixed,
    params_key,
)

EXPLORATIONS = ("order", "sampler")  # `run --exploration`; order is the default
MIN_GAIN = 0.002  # an expected gain below this (0.2%) is no reason to spend a deployment on it
ORDER_LIMIT = 6  # at most this many candidates before the sampler


@dataclass(frozen=True)
class ExpectedEffect:
    """One parameter value, as ratios against the prior's common configuration: of the mean
    E2EL at low concurrency (interactive use) and of the output throughput at high concurrency
    (throughput use)."""

    parameter: str
    value: Value
    e2el_ratio: float
    throughput_ratio: float


@dataclass(frozen=True)
class Prior:
    """Expected effects, and where they come from (said with the order)."""

    source: str
    effects: tuple[ExpectedEffect, ...]

    def of(self, parameter: str, value: Value) -> ExpectedEffect | None:
        return next((e for e in self.effects
                     if e.parameter == parameter and e.value == value), None)


# The reference study's one-change effects (/work/shared/reference/seed-study.md: two GPUs,
# vLLM 0.32, against opt3-baseline): E2EL at c=2 and output throughput at c=100 (req/s where
# it gives no tok/s). "Within about 1%" and "slightly better/worse" are read as 0 and 0.5%.
REFERENCE_STUDY = Prior("the reference study's one-change effects (2 GPUs, vLLM 0.32)", (
    ExpectedEffect("optimization_level", 0, 11796.860 / 1930.785, 1377.060 / 1663.330),
    ExpectedEffect("optimization_level", 1, 2724.515 / 1930.785, 6.523 / 6.497),
    ExpectedEffect("optimization_level", 2, 1945.348 / 1930.785, 6.581 / 6.497),
    ExpectedEffect("optimization_level", 3, 1.0, 1.0),
    ExpectedEffect("performance_mode", "throughput", 1.0, 1.0),
    ExpectedEffect("performance_mode", "balanced", 1.0, 1.005),
    ExpectedEffect("performance_mode", "interactivity", 1.0, 1.005),
    ExpectedEffect("expert_parallel", True, 1.0, 1.0),
    ExpectedEffect("expert_parallel", False, 0.995, 0.995),
    ExpectedEffect("mtp", True, 1.0, 1.0),
    ExpectedEffect("mtp", False, 2505.243 / 1930.785, 1785.471 / 1663.330),
))


@dataclass(frozen=True)
class Candidate:
    """One planned configuration: what it changes from the baseline (in the study's context),
    why it is planned, and the prior's expected ratios against the baseline."""

    params: Params
    changes: Mapping[str, Value]
    why: str  # "one change" or "the changes expected to help <use>, together"
    e2el_ratio: float
    throughput_ratio: float

    @property
    def gain(self) -> float:
        """The larger expected gain of the two uses (0.23: 23% lower latency or more throughput)."""
        return max(1 - self.e2el_ratio, self.throughput_ratio - 1)

    @property
    def text(self) -> str:
        """'mtp on (expected -23% latency, -7% throughput)'."""
        changes = ", ".join(_change_text(k, v) for k, v in self.changes.items())
        return (f"{changes} (expected {_signed(self.e2el_ratio - 1)} latency, "
                f"{_signed(self.throughput_ratio - 1)} throughput)")


def _change_text(name: str, value: Value) -> str:
    if isinstance(value, bool):
        return f"{name} {'on' if value else 'off'}"
    return f"{name}={value}"


def _signed(x: float) -> str:
    return f"{x:+.1%}".replace("-", "\u2212") if abs(x) >= 0.0005 else "\u00b10%"


def _expected(prior: Prior, start: Params, changes: Mapping[str, Value]) -> tuple[float, float] | None:
    e2el = tput = 1.0
    for name, value in changes.items():
        new, old = prior.of(name, value), prior.of(name, start.get(name))
        if new is None or old is None:
            return None
        e2el *= new.e2el_ratio / old.e2el_ratio
        tput *= new.throughput_ratio / old.throughput_ratio
    return e2el, tput


PRIOR_USES = ("latency", "throughput")  # what an objective asks of a configuration, as a prior knows it


def objective_uses(metrics: Sequence[tuple[str, bool]]) -> tuple[str, ...]:
    """The uses a study's objectives ask for, from their (metric, minimized) pairs: a maximized
    throughput is the throughput use, any other the latency use (E2EL, TTFT, TPOT)."""
    found = {"throughput" if "throughput" in metric and not minimized else "latency"
             for metric, minimized in metrics}
    return tuple(u for u in PRIOR_USES if u in found)


def exploration_order(space: SearchSpace, ctx: ModelContext, baseline: Params, prior: Prior,
                      *, uses: Sequence[str] = PRIOR_USES, limit: int = ORDER_LIMIT
                      ) -> tuple[Candidate, ...]:
    """The candidates to measure first after ``baseline`` (unset parameters at vLLM's defaults) in
    ``ctx``: every single change the prior expects to gain at least ``MIN_GAIN`` for one of ``uses``
    (``objective_uses``), largest first; then per use the best value of each parameter expected to
    help it, together, where that is more than one change. Parameters the model fixes (``fixed``) are
    in every candidate; at most ``limit``; none equal to the baseline or to an earlier candidate."""
    start = complete(space, ctx, baseline)
    pinned = fixed(space, ctx)
    singles: list[Candidate] = []
    for p in space.parameters:
        if p.name not in start or p.name in pinned or math.isinf(p.size()):
            continue
        for value in p.values():
            if value == start[p.name]:
                continue
            expected = _expected(prior, start, {p.name: value})
            params = complete(space, ctx, {**start, p.name: value})
            if expected is None or params == start:
                continue
            singles.append(Candidate(params, {p.name: value}, "one change", *expected))
    gains = {"latency": lambda c: 1 - c.e2el_ratio, "throughput": lambda c: c.throughput_ratio - 1}
    asked = [u for u in PRIOR_USES if u in uses] or list(PRIOR_USES)

    def gain(c: Candidate) -> float:
        return max(gains[u](c) for u in asked)

    singles.sort(key=lambda c: -gain(c))
    helpful = [c for c in singles if gain(c) >= MIN_GAIN]
    order = list(helpful)
    for use in asked:
        ratio = gains[use]
        best: dict[str, Candidate] = {}
        for c in sorted(helpful, key=ratio, reverse=True):
            name = next(iter(c.changes))
            if ratio(c) >= MIN_GAIN and name not in best:
                best[name] = c
        if len(best) > 1:
            changes = {k: v for c in best.values() for k, v in c.changes.items()}
            expected = _expected(prior, start, changes)
            assert expected is not None  # each change is known to the prior
            order.append(Candidate(complete(space, ctx, {**start, **changes}), changes,
                                   f"the changes expected to help {use}, together", *expected))
    seen = {params_key(start)}
    out = []
    for c in order:
        if params_key(c.params) not in seen:
            seen.add(params_key(c.params))
            out.append(c)
    return tuple(out[:limit])


def order_text(order: tuple[Candidate, ...], pinned: Mapping[str, Value] | None = None) -> str:
    """'exploration: 1. mtp on (expected -23% latency, -7% throughput) 2. ...', or that there is
    none; ``pinned``: what every candidate holds fixed (said once)."""
    if not order:
        return "exploration: the sampler from the first trial after the baseline"
    fixed_text = (" (each with " + ", ".join(_change_text(k, v) for k, v in pinned.items())
                  + ", fixed)") if pinned else ""
    items = " ".join(f"{i}. {c.text}" for i, c in enumerate(order, 1))
    return f"exploration{fixed_text}: {items}; then the sampler"
