"""Checks flag sets with the installed vLLM's own parser and engine-config checks, in-process.

No server is started: ``make_arg_parser`` parses the argv exactly as ``vllm serve`` would, and
``AsyncEngineArgs.create_engine_config`` runs vLLM's validation (model config, TP vs heads,
scheduler limits, speculative method, ...). Building the parser imports vLLM (~9 s), so one
validator is built lazily and reused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import importlib
import io
import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.core.space.search_space import Parameter, SearchSpace
from autotune.errors import ValidationError, ValidationUnavailable


def vllm_importable() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means: cannot validate here
        return False
    return True


def _first_problem(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for line in lines:
        if line.startswith("Value error, "):
            return line[len("Value error, "):].split(" [type=")[0]
    useful = [ln for ln in lines if not ln.startswith("For further information")]
    return " ".join(useful[:3])[:500] or type(exc).__name__


def _short(message: str, limit: int = 240) -> str:
    """vLLM's message cut after the sentence that passes ``limit`` characters."""
    if len(message) <= limit:
        return message
    ends = [m.end() for m in re.finditer(r"\.\s", message)]
    cut = next((e for e in ends if e >= 80), limit)
    return message[: min(cut, limit)].strip()


# Where vLLM keeps its `serve` argument parser, newest first (0.32; 0.26 and earlier).
PARSER_HOMES = ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")
FLEXIBLE_HOMES = ("vllm.utils.argparse_utils", "vllm.utils")
ENGINE_ARGS_HOMES = ("vllm.engine.arg_utils",)


def _first_found(modules: Sequence[str], name: str) -> Any:
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except Exception:  # noqa: BLE001 - absent, or a vLLM that fails to import: unavailable
            continue
    from autotune.shell.server.install import vllm_version

    raise ValidationUnavailable(f"{vllm_version()}: no {name} in {' or '.join(modules)}; "
                                "flags are checked by deploying them instead")


class VllmValidator:
    """Runs vLLM's parser and engine-config checks on ``vllm serve`` argv."""

    def __init__(self, engine_args_homes: Sequence[str] = ENGINE_ARGS_HOMES) -> None:
        self._parser: Any = None
        self._engine_args_homes = engine_args_homes  # where AsyncEngineArgs is (tests: a stand-in)

    def _get_parser(self) -> Any:
        if self._parser is None:
            # Config checks log warnings meant for a server console; keep the CLI readable.
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
            make_arg_parser = _first_found(PARSER_HOMES, "make_arg_parser")
            flexible = _first_found(FLEXIBLE_HOMES, "FlexibleArgumentParser")
            self._parser = make_arg_parser(flexible(prog="vllm serve"))
        return self._parser

    def parse(self, model: str, options: Sequence[str]) -> Any:
        """The argparse namespace vLLM builds from ``options``; ValidationError if rejected."""
        parser = self._get_parser()
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                return parser.parse_args(["--model", model, *options])
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            message = lines[-1] if lines else "argument parsing failed"
            raise ValidationError(message.replace("vllm serve: ", "")) from None

    def engine_args(self, model: str, options: Sequence[str]) -> Any:
        """vLLM's engine arguments for ``options``: ValidationError if vLLM rejects them,
        ValidationUnavailable if its engine arguments cannot be imported."""
        engine_args = _first_found(self._engine_args_homes, "AsyncEngineArgs")
        namespace = self.parse(model, options)
        try:
            return engine_args.from_cli_args(namespace)
        except Exception as exc:  # noqa: BLE001 - vLLM raises many types; all mean "rejected"
            raise ValidationError(_short(_first_problem(exc))) from None

    def resolve(self, model: str, options: Sequence[str]) -> Any:
        """The ``VllmConfig`` vLLM resolves ``options`` to; ValidationError with vLLM's message
        if vLLM rejects them."""
        args = self.engine_args(model, options)
        vllm_logger = logging.getLogger("vllm")
        level = vllm_logger.level
        vllm_logger.setLevel(logging.ERROR)
        try:
            return args.create_engine_config()
        except Exception as exc:  # noqa: BLE001 - vLLM raises many types; all mean "rejected"
            raise ValidationError(_short(_first_problem(exc))) from None
        finally:
            vllm_logger.setLevel(level)

    def check(self, model: str, options: Sequence[str]) -> None:
        """Raise ValidationError with vLLM's message if vLLM would reject these flags."""
        self.resolve(model, options)

    def accepts(self, argv: Sequence[str]) -> bool:
        """Whether vLLM's parser takes these options (parsing only, no config checks)."""
        try:
            self.parse("m", argv)
        except ValidationError:
            return False
        return True

    def _not_accepted(self, p: Parameter) -> tuple[str, tuple]:
        """(what the parser lacks, the values it accepts) for one parameter."""
        flags = self._get_parser()._option_string_actions
        flag = p.json.flag if p.json else p.flag
        needed = [flag] + ([f"--no-{flag[2:]}"] if p.type == "bool" and p.flag
                           and p.bool_style == "switch" else [])
        missing = [f for f in needed if f not in flags]
        if missing:
            return " and ".join(missing), ()
        if p.type != "categorical" or p.json:
            return "", p.choices
        kept = tuple(c for c in p.choices if self.accepts([p.flag, str(c)]))
        lost = [f"{p.flag} {c}" for c in p.choices if c not in kept]
        return ", ".join(lost), kept

    def restrict(self, space: SearchSpace, version: str) -> tuple[SearchSpace, list[str]]:
        """The space as the installed vLLM's parser takes it: a parameter whose flag it lacks
        is marked unsupported (left out as a parameter that does not apply to the model is),
        a categorical value it rejects is dropped. Returns the space and one line per change:
        "<parameter>: <flag or value> not accepted by vLLM <version>"."""
        params, notes = [], []
        for p in space.parameters:
            lost, kept = self._not_accepted(p)
            if lost:
                notes.append(f"{p.name}: {lost} not accepted by {version}")
                if not kept or p.default not in kept:
                    p = dataclasses.replace(p, unsupported=f"{lost} not accepted by {version}")
                else:
                    p = dataclasses.replace(p, choices=kept)
            params.append(p)
        return dataclasses.replace(space, parameters=tuple(params)), notes

    def config_file_argv(self, path: str) -> list[str]:
        """The argv vLLM derives from a ``vllm serve --config`` YAML file (its ``model`` key
        as ``--model``); ValidationError with vLLM's words where it cannot read it."""
        try:
            return list(self._get_parser().load_config_file(path))
        except (OSError, ValueError, AttributeError) as exc:
            raise ValidationError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                                  ) from None

    def long_names(self, words: Sequence[str]) -> list[str]:
        """``words`` checked by vLLM's parser (ValidationError with its message, such as
        "unrecognized arguments: --no-such-flag 3"), each option written by its long name as
        the parser reads it: aliases (``-tp``), underscores, ``--x=v`` and ``-O3`` resolved; a
        switch alone, a list option's values after it. Dotted options (``--x.key v``) and
        their values are kept."""
        self.parse("m", words)
        actions = self._get_parser()._option_string_actions
        out: list[str] = []
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            if word.startswith("-O") and not word.startswith("--") and word != "-O":
                out += ["--optimization-level", word[2:].lstrip("=")]
                continue
            name, eq, value = word.partition("=")
            base, dot, key = name.partition(".")
            if base.startswith("--"):
                base = "--" + base[2:].replace("_", "-")
            action = actions.get(base if base != "-O" else "--optimization-level")
            if action is None or not word.startswith("-"):
                out.append(word)  # what the parser took as a value: kept in place
                continue
            long = next((o for o in action.option_strings if o.startswith("--")), base)
            if dot:
                out += [f"{long}.{key}", value] if eq else [f"{long}.{key}"]
                continue
            nargs = action.nargs
            if nargs == 0:
                out.append(base if base.startswith("--no-") and base in action.option_strings
                           else long)
                continue
            values = [value] if eq else []
            many = nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)
            while not eq and i < len(words) and (many or not values) and not (
                    words[i].startswith("-") and words[i].partition("=")[0] in actions
                    or words[i].startswith("--")):
                values.append(words[i])
                i += 1
            out += [long, *values]
        return out


@functools.cache
def shared_validator() -> VllmValidator | None:
    """The one validator of this process (its parser is built once, ~9 s of vLLM imports), or
    None where vLLM cannot be imported."""
    return VllmValidator() if vllm_importable() else None


# VllmConfig fields that are not the engine: a random id per instance, and the names of the
# presets whose values the resolution has already written into the other fields (vLLM 0.32
# reads both only in vllm/config/vllm.py, while resolving). Fields with a leading underscore
# are resolution bookkeeping (whether a value was given or may still be auto-resolved).
NOT_THE_ENGINE = ("instance_id", "optimization_level", "performance_mode")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _canonical(obj: Any, depth: int = 0) -> Any:
    """A resolved configuration as JSON-able data, the same in every process."""
    if depth > 12:
        return type(obj).__name__
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__name__}.{obj.name}"
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _canonical(getattr(obj, f.name, None), depth + 1)
                for f in dataclasses.fields(obj) if not f.name.startswith("_")
                and not (depth == 0 and f.name in NOT_THE_ENGINE)}
    if isinstance(obj, Mapping):
        return {str(k): _canonical(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_canonical(v, depth + 1) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted((_canonical(v, depth + 1) for v in obj), key=json.dumps)
    if callable(getattr(obj, "to_dict", None)):  # a Hugging Face model config
        return _canonical(obj.to_dict(), depth + 1)
    return _ADDRESS.sub("", repr(obj))


def engine_identity(validator: VllmValidator, model: str, options: Sequence[str]) -> str:
    """The identity of the engine vLLM resolves ``options`` to: a hash of every field of its
    ``VllmConfig`` but ``NOT_THE_ENGINE``, so that two flag sets vLLM resolves alike (``-O2``
    and ``-O3`` in vLLM 0.32) are one engine, by the installed vLLM's own rules.
    ``VllmConfig.compute_hash`` is not it: it is the compile cache's key and leaves out what
    does not change the compiled graph (``--gpu-memory-utilization``, prefix caching), which
    changes performance. ValidationError where vLLM rejects the flags."""
    config = validator.resolve(model, options)
    text = json.dumps(_canonical(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
