"""Where a profile's requests come from: the registry of dataset formats. Pure. A profile's
``dataset:`` names a ``format`` (a key of ``FORMATS``), a ``path`` where it reads a file, and its
options; each format is one ``DatasetFormat`` record and one small module that makes a
``RequestSource``, with errors naming file, line and field (docs/architecture.md#adding-a-dataset-format).
Text is tokenized with the model's tokenizer (``Tokenizer``) where a length must be known."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.core.workload.datasets import jsonl, mooncake, random_text, shared_prefix, sharegpt
from autotune.core.workload.datasets.common import Tokenizer
from autotune.core.workload.profiles import DatasetSpec
from autotune.core.workload.requests import RequestSource
from autotune.errors import ConfigError


@dataclass(frozen=True)
class DatasetFormat:
    """One workload format: its options (with defaults), whether it reads a file, and how it
    becomes a request source."""

    name: str
    summary: str
    options: Mapping[str, Any]
    reads_file: bool
    build: Callable[..., RequestSource]  # (spec, text | None, tokenizer, where) -> source


FORMATS: dict[str, DatasetFormat] = {f.name: f for f in (
    DatasetFormat("jsonl", "a request per line: prompt or prompt_token_ids, output_len, "
                  "optional timestamp_ms", jsonl.OPTIONS, True, jsonl.build),
    DatasetFormat("sharegpt", "ShareGPT conversations, read as vLLM's benchmark reads them",
                  sharegpt.OPTIONS, True, sharegpt.build),
    DatasetFormat("mooncake", "a trace: timestamp, input_length, output_length, hash_ids "
                  "(shared blocks), replayed at its times", mooncake.OPTIONS, True, mooncake.build),
    DatasetFormat("shared-prefix", "generated groups of prompts that share a prefix",
                  shared_prefix.OPTIONS, False, shared_prefix.build),
    DatasetFormat("random", "random text of the profile's lengths, as vLLM's random dataset",
                  random_text.OPTIONS, False, random_text.build),
)}


def validate_dataset_spec(spec: DatasetSpec, where: str) -> DatasetSpec:
    """A profile's dataset checked against its format, with the format's defaults filled in;
    one-line errors naming ``where``."""
    name = spec.format
    if name not in FORMATS:
        raise ConfigError(f"{where}: dataset format {name!r} is not known; valid: {', '.join(FORMATS)}")
    fmt = FORMATS[name]
    given = dict(spec.options)
    unknown = set(given) - set(fmt.options)
    if unknown:
        raise ConfigError(f"{where}: dataset option(s) {', '.join(sorted(unknown))} are not "
                          f"{name}'s; valid: {', '.join(fmt.options) or 'none'}")
    path = spec.path
    if fmt.reads_file and not path:
        raise ConfigError(f"{where}: dataset format {name} reads a file: give its path")
    if not fmt.reads_file and path:
        raise ConfigError(f"{where}: dataset format {name} is generated and reads no path")
    options = {**fmt.options, **given}
    for key, default in fmt.options.items():
        if isinstance(default, bool) or default is None:
            continue
        if isinstance(default, int | float) and (not isinstance(options[key], int | float)
                                                 or options[key] < 0):
            raise ConfigError(f"{where}: dataset option {key} must be a number >= 0, "
                              f"got {options[key]!r}")
    return DatasetSpec(name, path, options, spec.sha256)


def source_of(spec: DatasetSpec, text: str | None, tokenizer: Tokenizer | None, where: str
              ) -> RequestSource:
    """The request source of a spec (``text``: the file's, for formats that read one)."""
    return FORMATS[spec.format].build(spec, text, tokenizer, where)


__all__ = ["FORMATS", "DatasetFormat", "DatasetSpec", "Tokenizer", "validate_dataset_spec", "source_of"]
