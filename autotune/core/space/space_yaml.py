"""Search spaces and reference configs from YAML: validation of every field, with one-line
errors naming the file, the parameter and the field. Pure: takes text, returns the records of
``core.space``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotune.core.maths.platforms import PLATFORMS
from autotune.core.space.search_space import (
    APPLIES_TO,
    DERIVED,
    FACTS,
    PLATFORM,
    TYPES,
    Condition,
    Deployment,
    JsonMapping,
    Parameter,
    Reference,
    ReferenceSet,
    SearchSpace,
)
from autotune.errors import SpaceError

_PARAM_KEYS = {
    "name", "type", "choices", "low", "high", "step", "log", "default", "flag", "json",
    "when", "applies_to", "bool_style", "help", "required",
}


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


def _parse_condition(path: str, where: str, other: str, raw: Any,
                     earlier: dict[str, Parameter]) -> Condition:
    """One ``when:`` entry: an earlier parameter or a fact, and a value, a list or {min: N}."""
    if other not in earlier and other not in FACTS:
        raise _fail(path, where, f"condition names unknown parameter {other!r} (conditions may "
                    "only refer to parameters listed before this one, or to facts: "
                    f"{', '.join(FACTS)})")
    if other == PLATFORM and (isinstance(raw, dict) or not raw or any(
            v not in PLATFORMS for v in (raw if isinstance(raw, list) else [raw]))):
        raise _fail(path, where, f"when: platform {raw!r} is unknown; valid: "
                    f"{', '.join(PLATFORMS)} (or a list of them)")
    if isinstance(raw, dict):
        if set(raw) != {"min"}:
            raise _fail(path, where, f"condition on {other!r}: a mapping must be {{min: N}}, "
                        f"got keys {sorted(raw)}")
        return Condition(min=_number(path, where, "min", raw["min"]))
    values = tuple(raw) if isinstance(raw, list) else (raw,)
    for v in values:
        if other in earlier and not earlier[other].contains(v):
            raise _fail(path, where, f"condition value {v!r} is not a value of {other!r}")
    return Condition(values=values)


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
    required = raw.get("required", False)
    if not isinstance(required, bool) or (required and (ptype != "bool" or not applies)):
        raise _fail(path, where, "required must be true or false, and true only for a bool "
                    "parameter with applies_to (where it applies, vLLM needs it on)")
    kwargs["required"] = required
    when = raw.get("when") or {}
    if not isinstance(when, dict):
        raise _fail(path, where, "when must map earlier parameter names or facts to a value, "
                    "a list of values or {min: N}")
    parsed_when = {other: _parse_condition(path, where, other, values, earlier)
                   for other, values in when.items()}
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


