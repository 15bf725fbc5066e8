"""Configuration to vLLM options: params in, argv or a ``vllm serve --config`` mapping out. Pure.

A configuration becomes an ordered mapping of vLLM options (``--flag`` -> value); that one
mapping renders both as argv (booleans as ``--x`` / ``--no-x``, dicts as compact JSON) and as
the YAML mapping that ``vllm serve --config`` reads, so the two cannot disagree.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core.space.search_space import ModelContext, Params, SearchSpace, Value
from autotune.errors import ConfigError

Options = dict[str, Any]


def substitute(obj: Any, derived: Mapping[str, Any]) -> Any:
    """Replace ``"${name}"`` by a derived value; a ``"<<"`` key merges a derived mapping
    under the other keys (``{"<<": "${rope_parameters}", "rope_type": "yarn"}`` keeps the
    model's rope_theta and partial rotary factor and changes only the type)."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        if "<<" in obj:
            out.update(copy.deepcopy(substitute(obj["<<"], derived)) or {})
        out.update({k: substitute(v, derived) for k, v in obj.items() if k != "<<"})
        return out
    if isinstance(obj, str) and obj.startswith("${") and obj.endswith("}"):
        return derived[obj[2:-1]]
    return obj


def _put(target: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value


def _merge(target: dict, extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def to_options(space: SearchSpace, ctx: ModelContext, params: Params) -> Options:
    """vLLM options for one configuration, deployment settings first, then parameters."""
    options: Options = {"--tensor-parallel-size": space.deployment.tensor_parallel_size}
    options["--max-model-len"] = ctx.max_model_len
    # A copy: a parameter's JSON merges into a fixed blob (a baseline's --speculative-config)
    options.update(copy.deepcopy(dict(space.deployment.flags)))
    derived = ctx.derived()
    for name, value in params.items():
        p = space.parameter(name)
        if p.flag:
            if p.type == "bool" and p.bool_style == "only_true" and not value:
                continue
            options[p.flag] = value
            continue
        assert p.json is not None
        blob = options.setdefault(p.json.flag, {})
        if p.type == "bool":
            if value and p.json.set:
                _merge(blob, substitute(p.json.set, derived))
            elif p.json.key:
                _put(blob, p.json.key, value)
        else:
            _put(blob, p.json.key, value)
    return {k: v for k, v in options.items() if v != {}}


def _render(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def options_to_argv(options: Mapping[str, Any]) -> list[str]:
    """argv fragment: ``--x`` / ``--no-x`` for booleans, compact JSON for dicts, a list's
    values one word each after its flag (``--middleware a b``)."""
    argv: list[str] = []
    for flag, value in options.items():
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list | tuple):
            argv += [flag, *map(_render, value)]
        else:
            argv += [flag, _render(value)]
    return argv


def options_to_config(model: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The mapping a YAML file for ``vllm serve --config`` holds (model included).

    vLLM turns each key back into ``--key value``, booleans into ``--key`` / ``--no-key`` and
    nested mappings into the JSON its flag takes.
    """
    config: dict[str, Any] = {"model": model}
    for flag, value in options.items():
        config[flag[2:]] = value
    return config


def to_argv(space: SearchSpace, ctx: ModelContext, params: Params) -> list[str]:
    """The vLLM option argv (after ``vllm serve MODEL``) of one configuration."""
    return options_to_argv(to_options(space, ctx, params))


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")  # not nan, inf or 32k


def _scalar(text: str) -> Value:
    if _NUMBER.match(text):
        try:
            return int(text)
        except ValueError:
            return float(text)
    return {"true": True, "false": False}.get(text.lower(), text)


def _value(text: str) -> Any:
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return _scalar(text)


def argv_to_options(argv: Sequence[str], where: str = "vLLM flags") -> Options:
    """``--x v``, ``--x=v``, ``--x`` (true), ``--no-x`` (false), ``--x v1 v2`` (a list),
    ``--x.key v`` (a key of the JSON ``--x`` takes), ``-O3``/``-O 3``
    (``--optimization-level``) to an ordered mapping of options; JSON values to mappings; the
    inverse of :func:`options_to_argv` for the argv it produced, and the reader of a user's
    flags (`run --baseline`, after vLLM's parser has named each option by its long name),
    where a word before the first flag is a ConfigError naming ``where``."""
    options: Options = {}
    i = 0
    words = list(argv)
    while i < len(words):
        word = words[i]
        if word.startswith("-O") and not word.startswith("--"):
            level = word[2:].lstrip("=") or (words[i + 1] if i + 1 < len(words) else "")
            options["--optimization-level"] = _scalar(level)
            i += 1 if word[2:] else 2
            continue
        if not word.startswith("--"):
            raise ConfigError(f"{where}: {word!r} is not a flag (expected --name [value])")
        flag, eq, text = word.partition("=")
        name, dot, key = flag.partition(".")
        name = name.replace("_", "-")
        values = [text] if eq else []
        i += 1
        while not eq and i < len(words) and not words[i].startswith("--") \
                and not (words[i].startswith("-O") and len(words[i]) > 2):
            values.append(words[i])
            i += 1
        value: Any = (True if not values else _value(values[0]) if len(values) == 1
                      else [_value(v) for v in values])
        if dot:
            blob = options.setdefault(name, {})
            if isinstance(blob, dict):
                _put(blob, key, value)
        elif not values and name.startswith("--no-"):
            options["--" + name[5:]] = False
        else:
            options[name] = value
    return options
