"""Turning profiles into request sources: reading dataset files (with their content hash) and
the model's tokenizer. The I/O half of ``core.workload.datasets``; everything is checked here,
before any deployment: a missing file, a file not in its format, a request that does not fit
the model's context, fewer requests than a profile sends."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from autotune.core.workload.datasets import FORMATS, Tokenizer, source_of, validate_dataset_spec
from autotune.core.workload.datasets.common import LoadedRequests, check_fits
from autotune.core.workload.datasets.random_text import RandomText
from autotune.core.workload.profiles import DatasetSpec, WorkloadProfile
from autotune.core.workload.requests import RandomPrompts, RequestSource
from autotune.errors import ConfigError


def load_tokenizer(model: str) -> Tokenizer | None:
    """The tokenizer of a local model folder (None where there is none to read)."""
    if not (Path(model) / "tokenizer_config.json").exists() and not (
            Path(model) / "tokenizer.json").exists():
        return None
    if _tokenizer_class(Path(model)) in _BACKEND_CLASSES and (Path(model) / "tokenizer.json").exists():
        # The class AutoTokenizer resolves these to, without importing AutoTokenizer: its
        # module pulls in torch and transformers' generation code (3-4 s of CPU here, 15-20 s
        # on a GPU machine before `autotune bench` sent its first request).
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(model)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model)


# tokenizer_config.json classes that are the tokenizers library's backend as they are.
_BACKEND_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def _tokenizer_class(folder: Path) -> str:
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return ""
    return str(config.get("tokenizer_class", "")) if isinstance(config, dict) else ""


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


def check_unchanged(was: DatasetSpec, sha256: str) -> None:
    """A study's dataset file must have the content it had when the study was created
    (``was.sha256``, None before it was read)."""
    if was.sha256 and was.sha256 != sha256:
        raise ConfigError(
            f"{was.path}: its content changed since the study was created (sha256 "
            f"{was.sha256[:12]}… then, {sha256[:12]}… now): use the file the study was created "
            "with, or start another --study")


class WordCounts:
    """Stands in for a tokenizer that does not exist yet (a dry run makes no model): a word
    counts as a token, so that every format parses its file and every check of the file's
    structure runs. ``asked`` says whether a length was asked for: what depends on it waits."""

    all_special_ids: list[int] = []

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.asked = False

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        self.asked = True
        return [1] * max(1, len(text.split()))

    def decode(self, ids: Sequence[int]) -> str:
        self.asked = True
        return " ".join("word" for _ in ids)


# What a dry run without the model leaves for the run that has it.
WAITS_FOR_THE_MODEL = ("token lengths against the max model length, and the number of requests "
                       "where counting them needs tokens (ShareGPT's length filter)")


def sources_for(profiles: Sequence[WorkloadProfile], *, vocab_size: int,
                tokenizer: Tokenizer | None, max_model_len: int, structure_only: bool = False
                ) -> tuple[tuple[WorkloadProfile, ...], dict[str, RequestSource]]:
    """Each profile's request source, and the profiles with their datasets' defaults and
    content hashes filled in (what a study stores). A profile without a dataset sends random
    text of its lengths, as vLLM's random dataset (the reference study's workload), or random
    token ids with ``token_ids``. ``structure_only`` (no tokenizer yet): ``WordCounts`` stands in
    and ``WAITS_FOR_THE_MODEL`` is not checked; the sources are not for sending."""
    if structure_only and tokenizer is None:
        tokenizer = WordCounts(vocab_size)
    done, sources = [], {}
    for p in profiles:
        if p.dataset is None:
            if not p.token_ids and tokenizer is None:
                raise ConfigError(
                    f"profile {p.name!r} sends random text, which needs the model's tokenizer: "
                    "give --model a local model folder (or --tokenizer to `bench`), or send "
                    "token ids instead (--token-ids, or token_ids: true in a profile file)")
            done.append(p)
            sources[p.name] = RandomPrompts(vocab_size) if p.token_ids else RandomText(tokenizer)
            continue
        where = f"profile {p.name!r}"
        spec = validate_dataset_spec(p.dataset, where)
        text = None
        if FORMATS[spec.format].reads_file:
            text, digest = _read(spec.path, where)
            check_unchanged(spec, digest)
            spec = dataclasses.replace(spec, sha256=digest)
            where = spec.path
        stand_in = tokenizer if isinstance(tokenizer, WordCounts) else None
        if stand_in is not None:
            stand_in.asked = False
        source = source_of(spec, text, tokenizer, where)
        count = p.num_prompts + p.warmups
        loaded = isinstance(source, LoadedRequests)
        # Lengths the stand-in gave (or would give) wait for the real tokenizer.
        lengths_known = stand_in is None or (loaded and not stand_in.asked)
        if lengths_known and isinstance(source, LoadedRequests):
            check_fits(source, max_model_len)
            if len(source.pool) < count:
                raise ConfigError(f"{where}: {len(source.pool)} requests, but profile {p.name!r} "
                                  f"sends {count} (num_prompts {p.num_prompts} + {p.warmups} warm-up "
                                  "requests); lower --num-prompts or add requests")
        elif lengths_known:
            longest = max(source.requests(p, min(count, 8), 0), key=lambda r: r.prompt_len + r.output_len)
            if longest.prompt_len + longest.output_len > max_model_len:
                raise ConfigError(f"{where}: prompts of {longest.prompt_len} tokens + "
                                  f"{longest.output_len} output exceed the deployment's max model "
                                  f"length {max_model_len}")
        done.append(dataclasses.replace(p, dataset=spec))
        sources[p.name] = source
    return tuple(done), sources
