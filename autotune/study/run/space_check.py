"""`autotune validate`'s checks: a space's references and random samples of it put to vLLM's
parser, and the distinct engines it holds, as records. Prints nothing (the CLI does)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import optuna

from autotune.core.deployment.flags import to_argv
from autotune.core.space.search_space import (
    ModelContext,
    Reference,
    SearchSpace,
    drawable_points,
    resolve_references,
    sample,
    space_size,
)
from autotune.errors import AutotuneError, ValidationError
from autotune.shell.validation import VllmValidator


@dataclass(frozen=True)
class ReferenceCheck:
    """One reference configuration: skipped (it does not apply to the model), else accepted or
    rejected by vLLM; ``reason`` says why it was skipped or what vLLM said."""

    name: str
    skipped: bool
    accepted: bool
    reason: str = ""

    @property
    def rejected(self) -> bool:
        return not self.skipped and not self.accepted


@dataclass(frozen=True)
class SampleCheck:
    """Random samples of the space put to vLLM: how many, and vLLM's messages with the number
    of samples each rejected, most frequent first."""

    samples: int
    rejected: tuple[tuple[str, int], ...]

    @property
    def rejected_count(self) -> int:
        return sum(n for _, n in self.rejected)


def check_references(validator: VllmValidator, space: SearchSpace, ctx: ModelContext,
                     configs: tuple[Reference, ...]) -> list[ReferenceCheck]:
    """Each of ``configs`` (a references file's) resolved for the model and checked."""
    found = []
    for ref in resolve_references(space, ctx, configs):
        if ref.skipped:
            found.append(ReferenceCheck(ref.name, skipped=True, accepted=False, reason=ref.skipped))
            continue
        try:
            validator.check(ctx.model.name, to_argv(space, ctx, ref.params))
            found.append(ReferenceCheck(ref.name, skipped=False, accepted=True))
        except AutotuneError as exc:
            found.append(ReferenceCheck(ref.name, skipped=False, accepted=False, reason=str(exc)))
    return found


def check_samples(validator: VllmValidator, space: SearchSpace, ctx: ModelContext, *,
                  samples: int, seed: int) -> SampleCheck:
    """``samples`` configurations drawn by Optuna's random sampler (seeded) and checked."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    rejected: Counter[str] = Counter()
    for _ in range(samples):
        trial = study.ask()
        try:
            validator.check(ctx.model.name, to_argv(space, ctx, sample(space, ctx, trial)))
        except AutotuneError as exc:
            rejected[str(exc)] += 1
        study.tell(trial, 0.0)
    return SampleCheck(samples, tuple(rejected.most_common()))


@dataclass(frozen=True)
class EngineCount:
    """How many configurations a space holds for one model, and how many engines they are."""

    combinations: float  # every value of every parameter the model and vLLM take, conditions aside
    drawable: float  # those a study can draw: each parameter only where its conditions hold
    engines: int | None  # distinct engines of the accepted ones; None: more than the limit
    rejected: int  # drawable ones that vLLM rejects

    @property
    def text(self) -> str:
        head = f"{self.combinations:g} combinations, {self.drawable:g} drawable"
        if self.engines is None:
            return f"{head} (too many to resolve one by one)"
        return f"{head}, {self.engines} distinct engines ({self.rejected} rejected by vLLM)"


RESOLVE_LIMIT = 5000  # drawable configurations resolved one by one (about 10 ms each)


def count_engines(space: SearchSpace, ctx: ModelContext,
                  engine: Callable[[Sequence[str]], str], *,
                  limit: int = RESOLVE_LIMIT) -> EngineCount:
    """The space's combinations, drawable configurations, and the distinct engines that
    ``engine`` (argv -> identity, ValidationError where rejected: ``shell.validation.
    engine_identity``) resolves the drawable ones to."""
    combinations = math.prod(p.size() for p in space.parameters
                             if not (p.unsupported or ctx.why_not(p.applies_to)))
    drawable = space_size(space, ctx)
    if drawable > limit:
        return EngineCount(combinations, drawable, None, 0)
    found: set[str] = set()
    rejected = 0
    for params in drawable_points(space, ctx):
        try:
            found.add(engine(to_argv(space, ctx, params)))
        except ValidationError:
            rejected += 1
    return EngineCount(combinations, drawable, len(found), rejected)
