"""vLLM flags back to a space's parameters (the inverse of ``core.deployment.flags``), for what a
user runs today (`run --baseline`). Pure.

Options a parameter expresses set the baseline's values; every other one is a fixed flag on every
trial, so that the study compares the user's own deployment with the space's changes on top of
it. Secrets are never stored; the rules in full: docs/studies.md#the-search."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.core.deployment.flags import (
    Options,
    options_to_argv,
    substitute,
    to_argv,
    to_options,
)
from autotune.core.space.search_space import (
    ModelContext,
    Params,
    SearchSpace,
    complete,
    inapplicable,
)
from autotune.errors import ConfigError

VLLM_DEFAULTS = "vllm-defaults"  # the baseline's name when the user gives none
# What the runner sets for every deployment: never part of a configuration, never stored.
DEPLOYMENT_OWN = ("--model", "--host", "--port", "--api-key", "--served-model-name")
# Options whose value is a secret: never stored, never echoed (a token reaches vLLM through the
# user's environment, HF_TOKEN); besides these, any option with one of SECRET_WORDS in its name.
SECRET_OPTIONS = ("--api-key", "--hf-token")
SECRET_WORDS = frozenset({"key", "token", "secret", "password", "passwd", "apikey"})
# The modules a command line may start vLLM's server with (``python -m MODULE``).
SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main")


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


@dataclass(frozen=True)
class Command:
    """A command line taken apart: the environment assignments in front of it (``VAR=value``),
    the model it names as a positional argument (None: none), and the option words after it."""

    env: tuple[tuple[str, str], ...]
    model: str | None
    words: tuple[str, ...]


def _is_assignment(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and name.replace("_", "a").isalnum() and not name[:1].isdigit()


def command_words(words: Sequence[str]) -> Command:
    """``[VAR=value ...] [vllm serve [MODEL] | python -m vllm.entrypoints.openai.api_server |
    python -m vllm.entrypoints.cli.main serve [MODEL]] OPTIONS``, or the options alone."""
    words = list(words)
    while words and words[0] in ("env", "exec"):
        words = words[1:]
    env = []
    while words and _is_assignment(words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append((name, value))
    head = [w.rsplit("/", 1)[-1] for w in words[:3]]
    if head[:2] == ["vllm", "serve"]:
        words = words[2:]
    elif len(head) >= 3 and head[0].startswith("python") and head[1] == "-m" \
            and head[2] in SERVER_MODULES:
        words = words[3:]
        if words[:1] == ["serve"]:
            words = words[1:]
        elif head[2] == "vllm.entrypoints.openai.api_server":
            return Command(tuple(env), None, tuple(words))
    model = None
    if words and not words[0].startswith("-"):
        model, words = words[0], words[1:]
    return Command(tuple(env), model, tuple(words))


def without_own(words: Sequence[str]) -> list[str]:
    """``words`` without the options the runner sets (``DEPLOYMENT_OWN`` but ``--model``) and
    their values: what may be stored, checked and echoed (a pasted API key never is)."""
    out: list[str] = []
    skipping = False
    for word in words:
        flag = word.partition("=")[0].replace("_", "-")
        if word.startswith("-"):
            skipping = flag in DEPLOYMENT_OWN and flag != "--model"
            if skipping:
                continue
        elif skipping:
            continue
        out.append(word)
    return out


def is_secret(flag: str) -> bool:
    """Whether an option (any spelling: ``--hf_token``, ``--x.key``) carries a secret: one of
    ``SECRET_OPTIONS``, or a name with a word of ``SECRET_WORDS`` (``--hf-token``, ``--api-key``,
    ``--db-password``; not ``--max-num-batched-tokens`` nor ``--tokenizer``)."""
    name = flag.partition("=")[0].lstrip("-").replace("_", "-").lower()
    return f"--{name}" in SECRET_OPTIONS or bool(SECRET_WORDS & set(re.split(r"[-.]", name)))


def secret_values(words: Sequence[str]) -> list[str]:
    """The secrets in a command line's words: environment assignments' values (``VAR=value``
    before the command) and secret options' values (``--opt value``, ``--opt=value``)."""
    found, hide = [], False
    for w in words:
        flag, eq, value = w.partition("=")
        if hide and not w.startswith("--"):
            found.append(w)
        elif w.startswith("-") and eq and is_secret(flag):
            found.append(value)
        elif not w.startswith("-") and _is_assignment(w):
            found.append(value)
        hide = w.startswith("-") and not eq and is_secret(w)
    return [v for v in found if v]


def masked(words: Sequence[str]) -> str:
    """A command line as the user gave it, with every secret replaced by ***: environment
    assignments as ``NAME=***``, secret options' values (``--api-key ***``,
    ``--hf_token=***``): what a message may echo."""
    out, hide = [], False
    for w in words:
        flag, eq, _ = w.partition("=")
        if hide and not w.startswith("--"):
            out.append("***")
        elif eq and (w.startswith("-") and is_secret(flag)
                     or not w.startswith("-") and _is_assignment(w)):
            out.append(f"{flag}=***")
        else:
            out.append(w)
        hide = w.startswith("-") and not eq and is_secret(w)
    return " ".join(out)


def scrubbed(text: str, words: Sequence[str]) -> str:
    """``text`` (a message, such as vLLM's parser's) with every secret of ``words`` as ***."""
    for secret in sorted(set(secret_values(words)), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


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


def with_fixed(space: SearchSpace, fixed: Mapping[str, Any]) -> SearchSpace:
    """``space`` with ``fixed`` among its deployment flags: deployed on every trial."""
    if not fixed:
        return space
    flags = {**space.deployment.flags, **fixed}
    return dataclasses.replace(space, deployment=dataclasses.replace(space.deployment, flags=flags))


@dataclass(frozen=True)
class GivenBaseline:
    """A baseline read from what the user runs: the baseline trial, and the fixed flags (every
    option no parameter of the space expresses) that every trial of the study deploys with."""

    baseline: Baseline
    fixed: Options

    @property
    def fixed_argv(self) -> tuple[str, ...]:
        return tuple(options_to_argv(self.fixed))


def baseline_of_options(space: SearchSpace, ctx: ModelContext, options: Options, *,
                        name: str, where: str) -> GivenBaseline:
    """The baseline the options describe (see the module's docstring): its parameters in
    ``space``, the other options as fixed flags; its argv has both. A ConfigError (one line)
    where an option conflicts with the space's deployment or a tuned value lies outside its
    parameter's domain."""
    left = {k: v for k, v in options.items() if k not in DEPLOYMENT_OWN and not is_secret(k)}
    tp = left.pop("--tensor-parallel-size", space.deployment.tensor_parallel_size)
    if tp != space.deployment.tensor_parallel_size:
        raise ConfigError(f"{where}: --tensor-parallel-size {tp} conflicts with the study's "
                          f"{space.deployment.tensor_parallel_size} (--tp, or the space's "
                          f"deployment in {space.path})")
    max_len = left.pop("--max-model-len", None)
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int)):
        raise ConfigError(f"{where}: --max-model-len {max_len!r}: expected a number of tokens")
    b_ctx = Baseline(name, {}, (), max_len).context(ctx)
    wrong = [f"{k} {_text(left[k])} conflicts with the space's {k} {_text(v)} ({space.path})"
             for k, v in space.deployment.flags.items() if k in left and left[k] != v]
    if wrong:
        raise ConfigError(f"{where}: {'; '.join(wrong)}")
    for k in space.deployment.flags:
        left.pop(k, None)
    derived = b_ctx.derived()
    given_options = copy.deepcopy(left)
    given: Params = {}
    for p in space.parameters:
        if p.flag and p.flag in left:
            value = left.pop(p.flag)
        elif p.flag and p.type == "bool" and p.bool_style == "only_true":
            continue
        elif p.json is not None and isinstance(left.get(p.json.flag), dict):
            blob = left[p.json.flag] = copy.deepcopy(left[p.json.flag])
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
    wrong += _owned_left(space, (ctx, b_ctx), left, given_options, derived)
    if wrong:
        raise ConfigError(f"{where}: outside the values the space {space.path} tunes: "
                          f"{'; '.join(wrong)}")
    params = complete(space, b_ctx, given)
    dropped = sorted(set(given) - set(params))
    if dropped:
        raise ConfigError(f"{where}: {', '.join(dropped)} do(es) not apply to this model or "
                          f"context in {space.path}")
    fixed_space = with_fixed(space, left)
    # rendered from the completed parameters (YaRN where its context needs it): the baseline
    # deploys what its record says, as every trial does
    return GivenBaseline(Baseline(name, params, _argv(fixed_space, b_ctx, params, max_len),
                                  max_len), left)


def _owned_left(space: SearchSpace, contexts: Sequence[ModelContext], left: Options,
                given: Options, derived: Mapping[str, Any]) -> list[str]:
    """What a parameter of the space (one that applies in one of ``contexts``) owns but could
    not read from the options left: a value the space cannot express, one entry per flag with
    the value given and the values its parameters tune. Never a fixed flag: every trial would
    deploy it, and the parameter's value overwrite part of it."""
    skipped = [set(inapplicable(space, c)) for c in contexts]
    tunes: dict[str, list[str]] = {}
    for p in space.parameters:
        if all(p.name in s for s in skipped):
            continue
        flag = p.flag or (p.json.flag if p.json else "")
        if flag not in left:
            continue
        if p.flag:
            text = _domain(p)
        elif p.type == "bool" and p.json is not None and p.json.set:
            text = f"unset or {_text(substitute(p.json.set, derived))}"
        else:
            text = f"{p.json.key if p.json else ''} {_domain(p)}"
        tunes.setdefault(flag, []).append(f"{p.name}: {text}")
    return [f"{flag} {_text(given.get(flag, left[flag]))} ({'; '.join(texts)})"
            for flag, texts in tunes.items()]


def _text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True) if isinstance(
        value, dict) else str(value)


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
