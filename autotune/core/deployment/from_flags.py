"""vLLM flags back to a space's parameters: the inverse of ``core.deployment.flags``, for what a
user runs today (`run --baseline`). Pure.

A baseline is given as a flag string ("--max-num-seqs 128 --enable-chunked-prefill"), or as the
text of what `autotune export` writes (a shell command, a ``vllm serve --config`` YAML mapping,
JSON); each becomes an ordered mapping of options, and the options become the space's
parameters. The flags the deployment itself needs (model, host, port, API key) are the runner's
and are dropped; tensor parallel must be the study's; ``--max-model-len`` sets the context the
baseline runs at (vLLM's default, the model's native context, when absent). An option no
parameter of the space expresses, or a value outside a parameter's domain, is a one-line
``ConfigError`` naming them: the baseline would otherwise be measured as something else than
what the user runs.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.deployment.flags import (
    Options,
    argv_to_options,
    options_to_argv,
    substitute,
    to_argv,
    to_options,
)
from autotune.core.space.search_space import ModelContext, Params, SearchSpace, complete
from autotune.errors import ConfigError

VLLM_DEFAULTS = "vllm-defaults"  # the baseline's name when the user gives none
# What the runner sets for every deployment: never part of a configuration. (`--config FILE`
# is not among them: its settings would be lost, so it is refused with the other flags the
# space cannot express; `autotune export --format yaml` files are read directly.)
DEPLOYMENT_OWN = ("--model", "--host", "--port", "--api-key", "--served-model-name")
SECRET_OPTIONS = ("--api-key",)  # never echoed in a message


@dataclass(frozen=True)
class Baseline:
    """What the user runs today, the study's first trial: its name (stored as the trial's
    ``reference``), its parameters in the space (every applicable one; unset ones at vLLM's
    default), the argv it deploys with, and the context length it runs at (``max_model_len``
    None: vLLM's default, the model's native context, and no ``--max-model-len`` flag)."""

    name: str
    params: Params
    argv: tuple[str, ...]
    max_model_len: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": dict(self.params), "argv": list(self.argv),
                "max_model_len": self.max_model_len}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Baseline:
        return cls(str(data["name"]), dict(data["params"]), tuple(data["argv"]),
                   data.get("max_model_len"))

    def context(self, ctx: ModelContext) -> ModelContext:
        """The model context the baseline's parameters apply in."""
        return ModelContext(ctx.model, self.max_model_len or ctx.model.native_context or
                            ctx.max_model_len, ctx.platform)


def _argv(space: SearchSpace, ctx: ModelContext, given: Params, max_model_len: int | None
          ) -> tuple[str, ...]:
    options = to_options(space, ctx, given)
    if max_model_len is None:
        options.pop("--max-model-len", None)
    return tuple(options_to_argv(options))


def defaults_baseline(space: SearchSpace, ctx: ModelContext) -> Baseline:
    """vLLM's defaults: no tuned flag, only what the deployment needs (tensor parallel and the
    space's fixed deployment flags), at the model's native context (no ``--max-model-len``: a
    space's longer context may need flags, such as YaRN, that vLLM's defaults do not set)."""
    native = Baseline(VLLM_DEFAULTS, {}, ()).context(ctx)
    return Baseline(VLLM_DEFAULTS, complete(space, native, {}), _argv(space, native, {}, None))


def reference_baseline(space: SearchSpace, ctx: ModelContext, name: str, params: Params
                       ) -> Baseline:
    """A reference configuration as the baseline: deployed as the study deploys references."""
    return Baseline(name, dict(params), tuple(to_argv(space, ctx, params)), ctx.max_model_len)


def split_argv(words: Sequence[str]) -> list[str]:
    """A command line's words without ``vllm serve MODEL`` in front (the model is the study's)."""
    words = list(words)
    if words[:2] == ["vllm", "serve"]:
        words = words[2:]
    if words and not words[0].startswith("-"):
        words = words[1:]  # the model, positional
    return words


def masked(words: Sequence[str]) -> str:
    """A flag string as the user gave it, with the values of secret options (``--api-key``)
    replaced by ***: what a message may echo."""
    out, hide = [], False
    for w in words:
        flag, eq, _ = w.partition("=")
        out.append("***" if hide else (f"{flag}=***" if eq and flag in SECRET_OPTIONS else w))
        hide = not eq and w in SECRET_OPTIONS
    return " ".join(out)


def options_of_text(text: str, where: str, *, kind: str) -> Options:
    """The options in what `autotune export` writes: ``kind`` shell (a command line), yaml (a
    ``vllm serve --config`` mapping, already parsed by the caller and given as JSON text) or
    json (export's JSON: its ``argv``, else its ``config``)."""
    if kind == "shell":
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        return argv_to_options(split_argv(shlex.split(" ".join(ln.rstrip("\\") for ln in lines))),
                               where)
    data = json.loads(text)
    if isinstance(data, Mapping) and isinstance(data.get("argv"), list):
        return argv_to_options([str(w) for w in data["argv"]], where)
    config = data.get("config", data) if isinstance(data, Mapping) else None
    if not isinstance(config, Mapping):
        raise ConfigError(f"{where}: expected a mapping of vLLM options (what `autotune export "
                          "--format yaml|json` writes)")
    return {("--" + str(k).replace("_", "-")): v for k, v in config.items()}


def _expresses(blob: Mapping[str, Any], part: Mapping[str, Any]) -> bool:
    """Whether ``blob`` holds every key of ``part`` with its value."""
    return all(k in blob and (_expresses(blob[k], v) if isinstance(v, Mapping)
                              and isinstance(blob[k], Mapping) else blob[k] == v)
               for k, v in part.items())


def _remove(blob: dict, part: Mapping[str, Any]) -> None:
    for k, v in part.items():
        if isinstance(v, Mapping) and isinstance(blob.get(k), dict):
            _remove(blob[k], v)
            if not blob[k]:
                del blob[k]
        else:
            blob.pop(k, None)


def _get(blob: Mapping[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(blob, Mapping) or key not in blob:
            return None
        blob = blob[key]
    return blob


def baseline_of_options(space: SearchSpace, ctx: ModelContext, options: Options, *,
                        name: str, where: str) -> Baseline:
    """The baseline the options describe in ``space``'s parameters (see the module's
    docstring); ConfigError naming every option the space cannot express."""
    left = {k: v for k, v in options.items() if k not in DEPLOYMENT_OWN}
    tp = left.pop("--tensor-parallel-size", space.deployment.tensor_parallel_size)
    if tp != space.deployment.tensor_parallel_size:
        raise ConfigError(f"{where}: --tensor-parallel-size {tp}, but the study deploys at "
                          f"{space.deployment.tensor_parallel_size} (--tp)")
    max_len = left.pop("--max-model-len", None)
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)):
        raise ConfigError(f"{where}: --max-model-len {max_len!r}: expected a number of tokens")
    b_ctx = Baseline(name, {}, (), max_len).context(ctx)
    wrong = [f"{k} {v}" for k, v in space.deployment.flags.items() if k in left and left[k] != v]
    for k in space.deployment.flags:
        left.pop(k, None)
    derived = b_ctx.derived()
    given: Params = {}
    for p in space.parameters:
        if p.flag and p.flag in left:
            value = left.pop(p.flag)
        elif p.flag and p.type == "bool" and p.bool_style == "only_true":
            continue
        elif p.json is not None and isinstance(left.get(p.json.flag), dict):
            blob = left[p.json.flag]
            if p.type == "bool" and p.json.set:
                part = substitute(p.json.set, derived)
                if not _expresses(blob, part):
                    continue
                value = True
                _remove(blob, part)
            else:
                value = _get(blob, p.json.key)
                if value is None:
                    continue
                _remove(blob, _nested(p.json.key, value))
            if not blob:
                del left[p.json.flag]
        else:
            continue
        if not p.contains(value):
            flag = p.flag or (p.json.flag if p.json else "")
            wrong.append(f"{flag} {value!r} ({p.name}: {_domain(p)})")
            continue
        given[p.name] = value
    wrong += [f"{k}" + ("" if v is True else f" {json.dumps(v) if isinstance(v, dict) else v}")
              for k, v in left.items()]
    if wrong:
        raise ConfigError(f"{where}: not expressible in the search space {space.path}: "
                          f"{'; '.join(wrong)} (its parameters: {', '.join(space.names)})")
    params = complete(space, b_ctx, given)
    dropped = sorted(set(given) - set(params))
    if dropped:
        raise ConfigError(f"{where}: {', '.join(dropped)} do(es) not apply to this model or "
                          f"context in {space.path}")
    return Baseline(name, params, _argv(space, b_ctx, given, max_len), max_len)


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    target = out
    *parents, last = dotted.split(".")
    for key in parents:
        target = target.setdefault(key, {})
    target[last] = value
    return out


def _domain(p: Any) -> str:
    if p.type == "bool":
        return "true or false"
    if p.type == "categorical":
        return "one of " + ", ".join(map(str, p.choices))
    return f"{p.low:g} to {p.high:g}"
