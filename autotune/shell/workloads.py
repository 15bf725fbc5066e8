"""Turning profiles into request sources: reading dataset files (with their content hash) and
the model's tokenizer. The I/O half of ``core.datasets``; everything is checked here, before any
deployment: a missing file, a file not in its format, a request that does not fit the model's
context, fewer requests than a profile sends."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.core.workload.datasets import FORMATS, Tokenizer, checked, source_of
from autotune.core.workload.datasets.common import LoadedRequests, check_fits
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts, RequestSource
from autotune.errors import ConfigError


def load_tokenizer(model: str) -> Tokenizer | None:
    """The tokenizer of a local model folder (None where there is none to read)."""
    if not (Path(model) / "tokenizer_config.json").exists() and not (
            Path(model) / "tokenizer.json").exists():
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


def with_absolute_paths(profiles: Mapping[str, WorkloadProfile], base: Path
                        ) -> dict[str, WorkloadProfile]:
    """Dataset paths of a profile file are relative to that file."""
    out = {}
    for name, p in profiles.items():
        if p.dataset is not None and p.dataset.path and not Path(p.dataset.path).is_absolute():
            p = dataclasses.replace(p, dataset=dataclasses.replace(
                p.dataset, path=str((base / p.dataset.path).resolve())))
        out[name] = p
    return out


def _read(path: str, where: str) -> tuple[str, str]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8"), hashlib.sha256(data).hexdigest()
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {path} is not UTF-8 text") from None


def sources_for(profiles: Sequence[WorkloadProfile], *, vocab_size: int,
                tokenizer: Tokenizer | None, max_model_len: int
                ) -> tuple[tuple[WorkloadProfile, ...], dict[str, RequestSource]]:
    """Each profile's request source, and the profiles with their datasets' defaults and
    content hashes filled in (what a study stores). A profile without a dataset sends random
    token ids of its lengths (the reference study's workload)."""
    done, sources = [], {}
    for p in profiles:
        if p.dataset is None:
            done.append(p)
            sources[p.name] = RandomPrompts(vocab_size)
            continue
        where = f"profile {p.name!r}"
        spec = checked(p.dataset, where)
        text = None
        if FORMATS[spec.format].reads_file:
            text, digest = _read(spec.path, where)
            if spec.sha256 and spec.sha256 != digest:
                raise ConfigError(
                    f"{spec.path}: its content changed since the study was created (sha256 "
                    f"{spec.sha256[:12]}… then, {digest[:12]}… now): use the file the study was "
                    "created with, or start another --study")
            spec = dataclasses.replace(spec, sha256=digest)
            where = spec.path
        source = source_of(spec, text, tokenizer, where)
        count = p.num_prompts + p.warmups
        if isinstance(source, LoadedRequests):
            check_fits(source, max_model_len)
            if len(source.pool) < count:
                raise ConfigError(f"{where}: {len(source.pool)} requests, but profile {p.name!r} "
                                  f"sends {count} (num_prompts {p.num_prompts} + {p.warmups} warm-up "
                                  "requests); lower --num-prompts or add requests")
        else:
            longest = max(source.requests(p, min(count, 8), 0), key=lambda r: r.prompt_len + r.output_len)
            if longest.prompt_len + longest.output_len > max_model_len:
                raise ConfigError(f"{where}: prompts of {longest.prompt_len} tokens + "
                                  f"{longest.output_len} output exceed the deployment's max model "
                                  f"length {max_model_len}")
        done.append(dataclasses.replace(p, dataset=spec))
        sources[p.name] = source
    return tuple(done), sources
