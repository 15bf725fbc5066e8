"""`autotune validate`'s checks: a space's references and random samples of it put to vLLM's
parser, and the distinct engines it holds, as records. Prints nothing (the CLI does)."""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna

from autotune.core.deployment.flags import to_argv
from autotune.core.plan.scheduling import REJECTED_CAP
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
from autotune.shell.bench.files import read_references
from autotune.shell.server.install import vllm_version
from autotune.shell.server.validation import VllmValidator, engine_identity


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
    ``engine`` (argv -> identity, ValidationError where rejected: ``shell.server.validation.
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


def validate_space(validator: VllmValidator | None, space: SearchSpace, ctx: ModelContext, *,
                   references: str | None, samples: int, seed: int,
                   say: Callable[[str], object]) -> bool:
    """`validate`: the engines the space resolves to, each reference of the file
    ``references`` and ``samples`` random draws put to vLLM's parser (None: not available
    here, said), a line each as they are known; True where vLLM rejected a reference."""
    if validator is None:
        say(f"configurations: {space_size(space, ctx):g} drawable")
        say("vLLM's parser is not available here: flags were not checked by it")
        return False
    count = count_engines(space, ctx, lambda argv: engine_identity(validator, ctx.model.name, argv))
    say(f"configurations for {ctx.model.name} on {vllm_version()}: {count.text}")
    refs = read_references(references, space).configs if references else ()
    checked = check_references(validator, space, ctx, refs)
    for ref in checked:
        say(f"reference {ref.name}: " + ("skipped, " + ref.reason if ref.skipped else
                                         "accepted by vLLM" if ref.accepted else
                                         f"rejected by vLLM: {ref.reason}"))
    drawn = check_samples(validator, space, ctx, samples=samples, seed=seed)
    say(f"{drawn.samples} random samples: {drawn.samples - drawn.rejected_count} accepted "
        f"by vLLM, {drawn.rejected_count} rejected")
    for message, times in drawn.rejected:
        say(f"  {times} x {message}")
    return any(r.rejected for r in checked)


@dataclass(frozen=True)
class PlannedCheck:
    """One planned trial of a dry run and vLLM's verdict on it: ``rejected`` holds vLLM's
    message ("" where accepted); ``unchecked`` why vLLM could not check it here."""

    label: str
    argv: tuple[str, ...]
    rejected: str = ""
    unchecked: str = ""


def check_planned(validator: VllmValidator | None, model: str,
                  planned: Sequence[tuple[str, Sequence[str]]]) -> list[PlannedCheck]:
    """Each planned trial (label, argv) put to vLLM's parser and config checks for ``model``
    (a folder holding the model's config.json), as a trial's validation would be."""
    found = []
    for label, argv in planned:
        if validator is None:
            found.append(PlannedCheck(label, tuple(argv), unchecked="vLLM cannot be imported here"))
            continue
        try:
            validator.check(model, argv)
            found.append(PlannedCheck(label, tuple(argv)))
        except ValidationError as exc:
            found.append(PlannedCheck(label, tuple(argv), rejected=str(exc)))
        except AutotuneError as exc:  # ValidationUnavailable: checked when it deploys
            found.append(PlannedCheck(label, tuple(argv), unchecked=str(exc)))
    return found


def dry_run_verdicts(checks: Sequence[PlannedCheck], trials: int | None) -> str:
    """One line: how many planned trials vLLM accepts and rejects, and what a rejection costs
    (``trials``: the study's --trials; None where a time budget decides the count)."""
    unchecked = [c for c in checks if c.unchecked]
    if unchecked:
        return (f"vLLM's parser did not check these flags here ({unchecked[0].unchecked}): "
                "each is checked when its trial starts")
    rejected = sum(bool(c.rejected) for c in checks)
    head = (f"vLLM's parser: {len(checks) - rejected} of {len(checks)} planned configuration(s) "
            f"accepted, {rejected} rejected")
    if not rejected:
        return head
    if trials is None:
        return f"{head}; a rejected one costs a validation, not a deployment"
    return (f"{head}; a rejected one costs a validation, not one of the {trials} trial(s), and "
            f"another draw takes its place (at most {REJECTED_CAP * trials} trials in all)")


@contextlib.contextmanager
def checkable_model(model: str) -> Iterator[str]:
    """The model to check flags against: ``model`` itself, or, where it is the generated
    model not written yet (a dry run in a fresh folder), its config.json and tokenizer in a
    temporary folder removed afterwards (``modelgen.checkpoints.write_config``; no weights)."""
    from autotune.study.run.study_plan import GENERATED_MODEL

    if (Path(model) / "config.json").exists() or not model.endswith(GENERATED_MODEL):
        yield model
        return
    from autotune.modelgen import checkpoints

    with tempfile.TemporaryDirectory(prefix="autotune-dry-run-") as folder:
        yield str(checkpoints.write_config(Path(folder) / Path(model).name, kind="moe", mtp=True,
                                           shape=checkpoints.RUN_SHAPE))
