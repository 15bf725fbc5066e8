"""Search spaces and reference configurations as records, and applying them to a model: which
parameters apply, sampling, completing, resolving references, the grid. Pure. A space
(``search_spaces/*.yaml``, parsed by ``core.space.space_yaml``; docs/spaces.md) holds fixed
``deployment`` settings and ordered ``parameters``, each with one vLLM mapping and optional
conditions (``when`` on earlier parameters or a ``FACTS`` entry, ``applies_to`` on the model).
``params_key`` is a configuration's one identity."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from autotune.core.maths.platforms import PLATFORMS
from autotune.core.space.model_facts import ModelInfo
from autotune.errors import SpaceError

Value = bool | int | float | str | None
Params = dict[str, Value]


def params_key(params: Mapping[str, Value]) -> str:
    """A configuration's one identity (duplicates, references, recorded tables)."""
    return json.dumps(dict(params), sort_keys=True)


TYPES = ("categorical", "int", "float", "bool")
APPLIES_TO = {
    "moe": "the model is not a mixture of experts",
    "dense": "the model is a mixture of experts",
    "mtp": "the model has no MTP (multi-token prediction) layers",
    "long_context": "max_model_len does not exceed the model's native context",
}
DERIVED = ("native_context", "max_model_len", "yarn_factor", "rope_parameters")
PLATFORM = "platform"  # the fact ``when: {platform: gpu}`` names: what the installed vLLM runs on


@dataclass(frozen=True)
class JsonMapping:
    """A value placed inside the JSON of one flag (``--speculative-config``, ...).

    ``key`` (dotted) receives the parameter's value; for a bool parameter ``set`` is merged
    into the flag's JSON when the value is true and nothing is added when false.
    """

    flag: str
    key: str = ""
    set: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Condition:
    """What one ``when:`` entry asks of an earlier parameter or a fact: one of ``values``, or
    (``min`` set) a number at least ``min``."""

    values: tuple[Value, ...] = ()
    min: float | None = None

    def holds(self, value: Value) -> bool:
        if self.min is None:
            return value in self.values
        return isinstance(value, int | float) and not isinstance(value, bool) and value >= self.min

    @property
    def text(self) -> str:
        if self.min is not None:
            return f">= {self.min:g}"
        return " or ".join(json.dumps(v) for v in self.values)


@dataclass(frozen=True)
class Parameter:
    """One tunable knob and how it reaches vLLM."""

    name: str
    type: str
    default: Value
    choices: tuple[Value, ...] = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    flag: str = ""
    json: JsonMapping | None = None
    when: Mapping[str, Condition] = field(default_factory=dict)
    applies_to: str = ""
    bool_style: str = "switch"  # switch: --x / --no-x; only_true: --x or nothing
    help: str = ""
    # A bool that vLLM needs on wherever it applies (YaRN beyond the native context: vLLM
    # refuses max_model_len > native without it): fixed on there, never drawn off.
    required: bool = False
    unsupported: str = ""  # why the installed vLLM cannot take it (set by the shell's validator)

    def contains(self, value: Value) -> bool:
        """Whether ``value`` lies in this parameter's domain."""
        if self.type == "bool":
            return isinstance(value, bool)
        if self.type == "categorical":
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.type == "int" and not float(value).is_integer():
            return False
        assert self.low is not None and self.high is not None
        return self.low <= value <= self.high

    def values(self) -> tuple[Value, ...]:
        """Every value of a finite domain, in order (ValueError for a continuous float)."""
        if self.type == "bool":
            return (False, True)
        if self.type == "categorical":
            return self.choices
        assert self.low is not None and self.high is not None
        if self.type == "float" and self.step is None:
            raise ValueError(f"{self.name}: a continuous float has no finite list of values")
        step = 1 if self.type == "int" and self.log else (self.step or 1)
        return tuple(self.low + i * step for i in range(int(self.size())))

    def size(self) -> float:
        """Number of distinct values (inf for a continuous float)."""
        if self.type == "bool":
            return 2
        if self.type == "categorical":
            return len(self.choices)
        assert self.low is not None and self.high is not None
        if self.type == "int" and not self.log:
            return int((self.high - self.low) // (self.step or 1)) + 1
        if self.type == "int":
            return int(self.high - self.low) + 1
        return math.inf if self.step is None else int((self.high - self.low) // self.step) + 1


@dataclass(frozen=True)
class Deployment:
    """Settings fixed for every trial of a space."""

    tensor_parallel_size: int = 2
    max_model_len: int | None = None
    flags: Mapping[str, Value] = field(default_factory=dict)  # extra fixed vLLM options


@dataclass(frozen=True)
class SearchSpace:
    """A validated search space."""

    name: str
    path: str
    deployment: Deployment
    parameters: tuple[Parameter, ...]
    description: str = ""
    text: str = field(default="", repr=False, compare=False)  # the YAML it was parsed from

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)


@dataclass(frozen=True)
class Reference:
    """A named configuration expressed in a space's parameters (unset ones take defaults)."""

    name: str
    params: Mapping[str, Value]
    base: str = ""
    description: str = ""


@dataclass(frozen=True)
class ModelContext:
    """What parameter applicability and derived values depend on."""

    model: ModelInfo
    max_model_len: int
    platform: str = ""  # one of PLATFORMS, told by the shell; "" unknown (a condition on it holds)

    def derived(self) -> dict[str, Any]:
        """Values a mapping can refer to as ``${name}``."""
        native = self.model.native_context
        factor = self.max_model_len / native if native else 1.0
        return {
            "native_context": native,
            "max_model_len": self.max_model_len,
            "yarn_factor": round(factor, 6),
            "rope_parameters": dict(self.model.rope_parameters),
        }

    def why_not(self, applies_to: str) -> str:
        """Empty when the condition holds, else the reason the parameter does not apply."""
        holds = {
            "": True,
            "moe": self.model.is_moe,
            "dense": not self.model.is_moe,
            "mtp": self.model.has_mtp,
            "long_context": self.max_model_len > self.model.native_context > 0,
        }[applies_to]
        return "" if holds else APPLIES_TO[applies_to]


@dataclass(frozen=True)
class Fact:
    """A deployment setting or a model fact that a ``when:`` condition may name."""

    name: str  # deployment.<setting> or model.<fact>
    read: Callable[[Deployment, Any], Value]  # (deployment, ModelInfo or None)
    help: str


# vLLM's default applies where the space's deployment does not set the flag.
FACTS = {f.name: f for f in (
    Fact("deployment.tensor_parallel_size", lambda d, m: d.tensor_parallel_size,
         "the space's tensor parallel size"),
    Fact("deployment.decode_context_parallel_size",
         lambda d, m: d.flags.get("--decode-context-parallel-size", 1),
         "--decode-context-parallel-size in the space's deployment flags (vLLM's default 1)"),
    Fact("model.is_moe", lambda d, m: m.is_moe, "the model is a mixture of experts"),
    Fact("model.num_experts", lambda d, m: m.num_experts, "the model's routed experts"),
    Fact("model.has_mtp", lambda d, m: m.has_mtp, "the model has MTP layers"),
    Fact(PLATFORM, lambda d, m: None,  # not the space's nor the model's: ModelContext.platform
         f"what the installed vLLM runs on: {' or '.join(PLATFORMS)}"),
)}


def facts(space: SearchSpace, ctx: ModelContext | None) -> dict[str, Value]:
    """The values of ``FACTS`` for this space and model; without a model, only the
    deployment's (a condition on an unknown model fact holds)."""
    model = ctx.model if ctx is not None else None
    known = {f.name: f.read(space.deployment, model) for f in FACTS.values()
             if model is not None or f.name.startswith("deployment.")}
    known.pop(PLATFORM, None)
    if ctx is not None and ctx.platform:
        known[PLATFORM] = ctx.platform
    return known


@dataclass(frozen=True)
class ReferenceSet:
    """The reference configs of a file, and which one is the baseline for deltas."""

    path: str
    configs: tuple[Reference, ...]
    baseline: str = ""


class Suggester(Protocol):
    """The part of ``optuna.Trial`` that sampling uses (a seam: tests pass a plain object)."""

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...
    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int: ...
    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float: ...


def inapplicable(space: SearchSpace, ctx: ModelContext) -> dict[str, str]:
    """Parameters that do not apply to this model or deployment (a condition on a fact fails),
    or that the installed vLLM does not take, with the reason."""
    known = facts(space, ctx)
    return {p.name: why for p in space.parameters
            if (why := p.unsupported or ctx.why_not(p.applies_to) or _failed_facts(p, known))}


def _failed_facts(param: Parameter, known: Mapping[str, Value]) -> str:
    failed = [f"{name} {cond.text}" for name, cond in param.when.items()
              if name in known and not cond.holds(known[name])]
    return "only with " + " and ".join(failed) if failed else ""


def _active(param: Parameter, params: Params, known: Mapping[str, Value]) -> bool:
    """Whether every condition holds: on a fact whose value is known, on that value; on a
    parameter, on the value drawn (one not drawn satisfies no condition)."""
    for name, cond in param.when.items():
        if name in FACTS:
            if name in known and not cond.holds(known[name]):
                return False
        elif not cond.holds(params.get(name)):
            return False
    return True


def inactive_reason(param: Parameter) -> str:
    """Why a parameter whose ``when:`` does not hold is left out."""
    return "only with " + " and ".join(f"{name} {cond.text}" for name, cond in param.when.items())


def fixed(space: SearchSpace, ctx: ModelContext) -> dict[str, Value]:
    """Parameters resolved against the model before sampling: a ``required`` one that applies
    is fixed on (YaRN where max_model_len exceeds the native context), so that no configuration
    drawn is one vLLM would refuse for its absence."""
    skip = inapplicable(space, ctx)
    return {p.name: True for p in space.parameters if p.required and p.name not in skip}


def sample(space: SearchSpace, ctx: ModelContext, trial: Suggester, *, pin: bool = True) -> Params:
    """Suggest one configuration: only parameters that apply and whose conditions hold; a fixed
    one (``fixed``) is offered to the sampler with its one value, so it is recorded with the
    trial and never drawn otherwise. ``pin`` False draws it as any other (a study created
    before parameters were fixed, whose stored distribution Optuna will not narrow)."""
    skip = inapplicable(space, ctx)
    known = facts(space, ctx)
    pinned = fixed(space, ctx) if pin else {}
    params: Params = {}
    for p in space.parameters:
        if p.name in skip or not _active(p, params, known):
            continue
        if p.name in pinned:
            params[p.name] = trial.suggest_categorical(p.name, [pinned[p.name]])
        elif p.type == "bool":
            params[p.name] = trial.suggest_categorical(p.name, [False, True])
        elif p.type == "categorical":
            params[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        elif p.type == "int":
            assert p.low is not None and p.high is not None
            params[p.name] = trial.suggest_int(
                p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log
            )
        else:
            assert p.low is not None and p.high is not None
            params[p.name] = trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log)
    return params


def complete(space: SearchSpace, ctx: ModelContext | None, given: Mapping[str, Value]) -> Params:
    """Applicable, active parameters with ``given`` values and defaults for the rest. Without
    a model (``ctx`` None: results measured elsewhere) every parameter applies."""
    skip = inapplicable(space, ctx) if ctx is not None else {}
    pinned = fixed(space, ctx) if ctx is not None else {}
    known = facts(space, ctx)
    params: Params = {}
    for p in space.parameters:
        if p.name not in skip and _active(p, params, known):
            params[p.name] = pinned.get(p.name, given.get(p.name, p.default))
    return params


@dataclass(frozen=True)
class ResolvedReference:
    """A reference config made concrete for one model, or skipped with the reason."""

    name: str
    params: Params
    skipped: str = ""


def resolve_references(
    space: SearchSpace, ctx: ModelContext, refs: tuple[Reference, ...]
) -> tuple[ResolvedReference, ...]:
    """Each reference for this model; skipped when its change does not apply or repeats one."""
    skip = inapplicable(space, ctx)
    pinned = fixed(space, ctx)
    out: list[ResolvedReference] = []
    seen: dict[str, str] = {}
    by_name = {r.name: r for r in refs}
    for ref in refs:
        params = complete(space, ctx, ref.params)
        base = by_name.get(ref.base)
        changed = {k for k, v in ref.params.items() if base is None or base.params.get(k) != v}
        why = {**skip, **{k: inactive_reason(space.parameter(k)) for k in changed
                          if k not in params and k not in skip},
               **{k: f"fixed on here ({ctx.max_model_len:,} > the model's native context "
                     f"{ctx.model.native_context:,}: vLLM refuses it off)"
                  for k in changed if k in pinned and ref.params[k] != pinned[k]}}
        dropped = sorted(changed & set(why))
        key = params_key(params)
        if base is not None and dropped and dropped == sorted(changed):
            reasons = "; ".join(f"{name}: {why[name]}" for name in dropped)
            out.append(ResolvedReference(ref.name, params, f"does not apply ({reasons})"))
        elif key in seen:
            out.append(ResolvedReference(ref.name, params, f"same flags as {seen[key]!r}"))
        else:
            seen[key] = ref.name
            out.append(ResolvedReference(ref.name, params))
    return tuple(out)


def grid_points(space: SearchSpace) -> list[Params]:
    """Every combination of a space of categorical and bool parameters, in the space's order
    (the last parameter varies fastest)."""
    choices = []
    for p in space.parameters:
        if p.type not in ("bool", "categorical"):
            raise SpaceError(f"{space.path}: parameter {p.name!r} is {p.type}; a grid needs "
                             "categorical and bool parameters only")
        choices.append((False, True) if p.type == "bool" else p.choices)
    return [dict(zip(space.names, values, strict=True)) for values in itertools.product(*choices)]


def drawable_points(space: SearchSpace, ctx: ModelContext) -> list[Params]:
    """Every configuration ``sample`` can draw for this model, in the space's order (the last
    parameter varies fastest). SpaceError for a continuous float, which has no such list."""
    skip = inapplicable(space, ctx)
    known = facts(space, ctx)
    pinned = fixed(space, ctx)
    points: list[Params] = [{}]
    for p in space.parameters:
        if p.name in skip:
            continue
        try:
            values = (pinned[p.name],) if p.name in pinned else p.values()
        except ValueError as exc:
            raise SpaceError(f"{space.path}: {exc}; its configurations cannot be listed") from None
        points = [drawn for params in points for drawn in (
            [{**params, p.name: v} for v in values] if _active(p, params, known) else [params])]
    return points


def space_size(space: SearchSpace, ctx: ModelContext) -> float:
    """How many configurations ``sample`` can draw for this model: parameters that apply,
    each counted only where its conditions hold (inf with a continuous float)."""
    skip = inapplicable(space, ctx)
    known = facts(space, ctx)
    pinned = fixed(space, ctx)
    drawn = [p for p in space.parameters if p.name not in skip]
    conditioning = {name for p in drawn for name in p.when}

    def count(i: int, chosen: Params) -> float:
        if i == len(drawn):
            return 1
        p = drawn[i]
        if not _active(p, chosen, known):
            return count(i + 1, chosen)
        values = (pinned[p.name],) if p.name in pinned else None
        if p.name not in conditioning:
            return (1 if values else p.size()) * count(i + 1, chosen)
        if values is None and math.isinf(p.size()):
            return math.inf
        return sum(count(i + 1, {**chosen, p.name: v}) for v in (values or p.values()))

    return count(0, {})
