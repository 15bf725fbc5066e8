"""Checks flag sets with the installed vLLM's own parser and engine-config checks, in-process.

No server is started: ``make_arg_parser`` parses the argv exactly as ``vllm serve`` would, and
``AsyncEngineArgs.create_engine_config`` runs vLLM's validation (model config, TP vs heads,
scheduler limits, speculative method, ...). Building the parser imports vLLM (~9 s), so one
validator is built lazily and reused.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
from collections.abc import Sequence
from typing import Any

from autotune.errors import ValidationError


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


class VllmValidator:
    """Runs vLLM's parser and engine-config checks on ``vllm serve`` argv."""

    def __init__(self) -> None:
        self._parser: Any = None

    def _get_parser(self) -> Any:
        if self._parser is None:
            # Config checks log warnings meant for a server console; keep the CLI readable.
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
            from vllm.entrypoints.launchers.cli_args import make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            self._parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
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
        from vllm.engine.arg_utils import AsyncEngineArgs

        return AsyncEngineArgs.from_cli_args(self.parse(model, options))

    def check(self, model: str, options: Sequence[str]) -> None:
        """Raise ValidationError with vLLM's message if vLLM would reject these flags."""
        args = self.engine_args(model, options)
        vllm_logger = logging.getLogger("vllm")
        level = vllm_logger.level
        vllm_logger.setLevel(logging.ERROR)
        try:
            args.create_engine_config()
        except Exception as exc:  # noqa: BLE001 - vLLM raises many types; all mean "rejected"
            raise ValidationError(_short(_first_problem(exc))) from None
        finally:
            vllm_logger.setLevel(level)

    def config_file_argv(self, path: str) -> list[str]:
        """The argv vLLM derives from a ``vllm serve --config`` YAML file."""
        return list(self._get_parser().load_config_file(path))
