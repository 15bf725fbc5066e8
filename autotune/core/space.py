"""Search spaces and reference configurations: YAML in, validated records out. Pure.

A space file (``search_spaces/*.yaml``) holds fixed ``deployment`` settings and an ordered
list of ``parameters``. Each parameter has a type, a domain, a default, exactly one vLLM
mapping (``flag`` or ``json``), and optional conditions (``when`` on earlier parameters,
``applies_to`` on the model). See the README's "Search spaces" section for the format.
Nothing here launches, imports vLLM or touches the network.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from autotune.core.model_info import ModelInfo
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
_PARAM_KEYS = {
    "name", "type", "choices", "low", "high", "step", "log", "default", "flag", "json",
    "when", "applies_to", "bool_style", "help",
}


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
    when: Mapping[str, tuple[Value, ...]] = field(default_factory=dict)
    applies_to: str = ""
    bool_style: str = "switch"  # switch: --x / --no-x; only_true: --x or nothing
    help: str = ""
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


# --------------------------------------------------------------------------- loading


def _fail(path: str, where: str, problem: str) -> SpaceError:
    return SpaceError(f"{path}: {where}: {problem}")


def _parse_yaml(path: str, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}" if mark is not None else "syntax"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpaceError(f"{path}: {at}: YAML syntax error: {problem}") from exc


def _number(path: str, where: str, key: str, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise _fail(path, where, f"{key} must be a number, got {raw!r}")
    return raw


def _parse_json_mapping(path: str, where: str, raw: Any, ptype: str) -> JsonMapping:
    if not isinstance(raw, dict) or not str(raw.get("flag", "")).startswith("--"):
        raise _fail(path, where, "json must be a mapping with 'flag: --some-flag'")
    unknown = set(raw) - {"flag", "key", "set"}
    if unknown:
        raise _fail(path, where, f"json has unknown keys {sorted(unknown)}; valid: flag, key, set")
    mapping = JsonMapping(flag=raw["flag"], key=str(raw.get("key", "")), set=raw.get("set") or {})
    if ptype == "bool" and not mapping.set and not mapping.key:
        raise _fail(path, where, "a bool json mapping needs 'set' (merged when true) or 'key'")
    if ptype != "bool" and not mapping.key:
        raise _fail(path, where, "json mapping needs 'key' (dotted path receiving the value)")
    _check_placeholders(path, where, mapping.set)
    return mapping


def _check_placeholders(path: str, where: str, obj: Any) -> None:
    if isinstance(obj, dict):
        for v in obj.values():
            _check_placeholders(path, where, v)
    elif isinstance(obj, str) and obj.startswith("${"):
        name = obj[2:-1]
        if not obj.endswith("}") or name not in DERIVED:
            raise _fail(path, where, f"unknown derived value {obj!r}; valid: {list(DERIVED)}")


def _parse_parameter(path: str, index: int, raw: Any, earlier: dict[str, Parameter]) -> Parameter:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise _fail(path, f"parameters[{index}]", "each parameter needs a 'name'")
    name = raw["name"]
    where = f"parameter {name!r}"
    if name in earlier:
        raise _fail(path, where, "defined twice")
    unknown = set(raw) - _PARAM_KEYS
    if unknown:
        raise _fail(path, where, f"unknown keys {sorted(unknown)}; valid: {sorted(_PARAM_KEYS)}")
    ptype = raw.get("type")
    if ptype not in TYPES:
        raise _fail(path, where, f"unknown type {ptype!r}; valid: {', '.join(TYPES)}")
    kwargs: dict[str, Any] = {"name": name, "type": ptype, "help": str(raw.get("help", ""))}
    if ptype == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise _fail(path, where, "choices must be a non-empty list")
        if len(set(map(repr, choices))) != len(choices):
            raise _fail(path, where, "choices must be distinct")
        kwargs["choices"] = tuple(choices)
    elif ptype in ("int", "float"):
        low = _number(path, where, "low", raw.get("low"))
        high = _number(path, where, "high", raw.get("high"))
        if low > high:
            raise _fail(path, where, f"low ({low}) must be <= high ({high})")
        log = bool(raw.get("log", False))
        if log and low <= 0:
            raise _fail(path, where, f"log scale needs low > 0, got {low}")
        step = raw.get("step")
        if step is not None:
            step = _number(path, where, "step", step)
            if step <= 0 or log:
                raise _fail(path, where, "step must be > 0 and cannot be combined with log")
        kwargs.update(low=low, high=high, log=log, step=step)
    flag, json_raw = raw.get("flag"), raw.get("json")
    if (flag is None) == (json_raw is None):
        raise _fail(path, where, "needs exactly one vLLM mapping: 'flag' or 'json'")
    if flag is not None:
        if not isinstance(flag, str) or not flag.startswith("--"):
            raise _fail(path, where, f"flag must look like '--some-flag', got {flag!r}")
        kwargs["flag"] = flag
    else:
        kwargs["json"] = _parse_json_mapping(path, where, json_raw, ptype)
    style = raw.get("bool_style", "switch")
    if style not in ("switch", "only_true"):
        raise _fail(path, where, f"bool_style must be 'switch' or 'only_true', got {style!r}")
    kwargs["bool_style"] = style
    applies = raw.get("applies_to", "")
    if applies not in ("", *APPLIES_TO):
        raise _fail(path, where, f"applies_to {applies!r} is unknown; valid: {list(APPLIES_TO)}")
    kwargs["applies_to"] = applies
    when = raw.get("when") or {}
    if not isinstance(when, dict):
        raise _fail(path, where, "when must map earlier parameter names to a value or list")
    parsed_when: dict[str, tuple[Value, ...]] = {}
    for other, values in when.items():
        if other not in earlier:
            raise _fail(
                path, where, f"condition names unknown parameter {other!r} "
                "(conditions may only refer to parameters listed before this one)"
            )
        values = tuple(values) if isinstance(values, list) else (values,)
        for v in values:
            if not earlier[other].contains(v):
                raise _fail(path, where, f"condition value {v!r} is not a value of {other!r}")
        parsed_when[other] = values
    kwargs["when"] = parsed_when
    param = Parameter(default=None, **kwargs)
    if "default" not in raw:
        raise _fail(path, where, "needs a 'default' (the value vLLM uses when not tuned)")
    if not param.contains(raw["default"]):
        raise _fail(path, where, f"default {raw['default']!r} is outside the parameter's domain")
    return Parameter(default=raw["default"], **kwargs)


def _parse_deployment(path: str, raw: Any) -> Deployment:
    if raw is None:
        return Deployment()
    if not isinstance(raw, dict):
        raise _fail(path, "deployment", "must be a mapping")
    unknown = set(raw) - {"tensor_parallel_size", "max_model_len", "flags"}
    if unknown:
        raise _fail(path, "deployment", f"unknown keys {sorted(unknown)}; "
                    "valid: tensor_parallel_size, max_model_len, flags")
    tp = raw.get("tensor_parallel_size", 2)
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise _fail(path, "deployment.tensor_parallel_size", f"must be an integer >= 1, got {tp!r}")
    mml = raw.get("max_model_len")
    if mml is not None and (not isinstance(mml, int) or isinstance(mml, bool) or mml < 1):
        raise _fail(path, "deployment.max_model_len", f"must be an integer >= 1, got {mml!r}")
    flags = raw.get("flags") or {}
    if not isinstance(flags, dict) or not all(str(k).startswith("--") for k in flags):
        raise _fail(path, "deployment.flags", "must map '--flag' names to values")
    return Deployment(tensor_parallel_size=tp, max_model_len=mml, flags=flags)


def parse_space(text: str, where: str) -> SearchSpace:
    """Validate a search space given as YAML text; ``where`` names it in errors (its file)."""
    raw = _parse_yaml(where, text)
    if not isinstance(raw, dict) or not isinstance(raw.get("parameters"), list):
        raise _fail(where, "top level", "expected a mapping with a 'parameters' list")
    unknown = set(raw) - {"name", "description", "deployment", "parameters"}
    if unknown:
        raise _fail(where, "top level", f"unknown keys {sorted(unknown)}; "
                    "valid: name, description, deployment, parameters")
    params: dict[str, Parameter] = {}
    for i, item in enumerate(raw["parameters"]):
        param = _parse_parameter(where, i, item, params)
        params[param.name] = param
    if not params:
        raise _fail(where, "parameters", "must list at least one parameter")
    return SearchSpace(
        name=str(raw.get("name") or Path(where).stem),
        path=where,
        text=text,
        deployment=_parse_deployment(where, raw.get("deployment")),
        parameters=tuple(params.values()),
        description=str(raw.get("description", "")),
    )


@dataclass(frozen=True)
class ReferenceSet:
    """The reference configs of a file, and which one is the baseline for deltas."""

    path: str
    configs: tuple[Reference, ...]
    baseline: str = ""


def parse_references(text: str, where: str, space: SearchSpace) -> ReferenceSet:
    """Validate reference configs given as YAML text; each is checked against ``space``."""
    raw = _parse_yaml(where, text)
    if not isinstance(raw, dict) or not isinstance(raw.get("configs"), list):
        raise _fail(where, "top level", "expected a mapping with a 'configs' list")
    unknown = set(raw) - {"space", "baseline", "configs"}
    if unknown:
        raise _fail(where, "top level", f"unknown keys {sorted(unknown)}; "
                    "valid: space, baseline, configs")
    refs: dict[str, Reference] = {}
    for i, item in enumerate(raw["configs"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _fail(where, f"configs[{i}]", "each reference config needs a 'name'")
        name = item["name"]
        if name in refs:
            raise _fail(where, f"reference {name!r}", "defined twice")
        base = str(item.get("base", ""))
        if base and base not in refs:
            raise _fail(where, f"reference {name!r}", f"base {base!r} is not defined above it")
        own = item.get("params") or {}
        if not isinstance(own, dict):
            raise _fail(where, f"reference {name!r}", "params must be a mapping")
        for key, value in own.items():
            if key not in space.names:
                raise _fail(where, f"reference {name!r}", f"unknown parameter {key!r} "
                            f"(not in {space.path}; valid: {', '.join(space.names)})")
            if not space.parameter(key).contains(value):
                raise _fail(where, f"reference {name!r}",
                            f"value {value!r} of {key!r} is outside the space")
        params = {**(refs[base].params if base else {}), **own}
        refs[name] = Reference(
            name=name, params=params, base=base, description=str(item.get("description", ""))
        )
    baseline = str(raw.get("baseline") or next(iter(refs), ""))
    if baseline and baseline not in refs:
        raise _fail(where, "baseline", f"{baseline!r} is not one of the configs")
    return ReferenceSet(path=where, configs=tuple(refs.values()), baseline=baseline)


# --------------------------------------------------------------------- applying to a model


class Suggester(Protocol):
    """The part of ``optuna.Trial`` that sampling uses (a seam: tests pass a plain object)."""

    def suggest_categorical(self, name: str, choices: Any) -> Any: ...
    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1,
                    log: bool = False) -> int: ...
    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float: ...


def inapplicable(space: SearchSpace, ctx: ModelContext) -> dict[str, str]:
    """Parameters that do not apply to this model (or that the installed vLLM does not take),
    with the reason."""
    return {p.name: why for p in space.parameters
            if (why := p.unsupported or ctx.why_not(p.applies_to))}


def _active(param: Parameter, params: Params) -> bool:
    return all(params.get(other) in values for other, values in param.when.items())


def sample(space: SearchSpace, ctx: ModelContext, trial: Suggester) -> Params:
    """Suggest one configuration: only parameters that apply and whose conditions hold."""
    skip = inapplicable(space, ctx)
    params: Params = {}
    for p in space.parameters:
        if p.name in skip or not _active(p, params):
            continue
        if p.type == "bool":
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
    params: Params = {}
    for p in space.parameters:
        if p.name not in skip and _active(p, {**params}):
            params[p.name] = given.get(p.name, p.default)
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
    out: list[ResolvedReference] = []
    seen: dict[str, str] = {}
    by_name = {r.name: r for r in refs}
    for ref in refs:
        params = complete(space, ctx, ref.params)
        base = by_name.get(ref.base)
        changed = {k for k, v in ref.params.items() if base is None or base.params.get(k) != v}
        dropped = sorted(changed & set(skip))
        key = params_key(params)
        if base is not None and dropped and dropped == sorted(changed):
            reasons = "; ".join(f"{name}: {skip[name]}" for name in dropped)
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


def space_size(space: SearchSpace, ctx: ModelContext) -> float:
    """Upper bound on distinct configurations over the applicable parameters."""
    skip = inapplicable(space, ctx)
    return math.prod(p.size() for p in space.parameters if p.name not in skip)
