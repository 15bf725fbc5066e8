"""What every dataset format shares: the spec, the tokenizer it needs, sampling a loaded file,
text of an exact token length, and errors that name the file, the line and the field. Pure."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import Request
from autotune.errors import ConfigError


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer the formats use."""

    vocab_size: int
    all_special_ids: list[int]

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


def fail(where: str, line: int | None, problem: str) -> ConfigError:
    return ConfigError(f"{where}{f': line {line}' if line is not None else ''}: {problem}")


def json_lines(text: str, where: str, example: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON-lines file; a line that is not a
    JSON object is a one-line error naming the file, the line and an ``example`` line."""
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise fail(where, number, f"not JSON ({exc.msg}); expected one object per line, e.g. "
                       f"{example}") from None
        if not isinstance(item, dict):
            raise fail(where, number, f"expected a JSON object, e.g. {example}")
        yield number, item


def need_tokenizer(tokenizer: Tokenizer | None, where: str) -> Tokenizer:
    if tokenizer is None:
        raise ConfigError(f"{where}: this dataset needs the model's tokenizer (to count or make "
                          "its tokens): give --model a local model folder, or --tokenizer to `bench`")
    return tokenizer


def allowed_ids(tokenizer: Tokenizer) -> np.ndarray:
    special = set(tokenizer.all_special_ids)
    return np.array([i for i in range(tokenizer.vocab_size) if i not in special])


def text_of_length(tokenizer: Tokenizer, ids: Sequence[int], target: int,
                   rng: np.random.Generator, allowed: np.ndarray, retries: int = 10
                   ) -> tuple[str, int]:
    """Text whose re-tokenization has ``target`` tokens where ``retries`` adjustments reach it,
    as vLLM's random dataset makes it (``gen_prompt_decode_to_target_len``): decode, encode,
    then truncate or pad with random ids and try again. Returns the text and its length."""
    ids = list(ids)
    for _ in range(retries + 1):
        text = tokenizer.decode(ids)
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == target:
            break
        if len(ids) > target:
            ids = ids[:target]
        else:
            ids += allowed[rng.integers(0, len(allowed), size=target - len(ids))].tolist()
    return text, len(tokenizer.encode(text, add_special_tokens=False))


@dataclass(frozen=True)
class LoadedRequests:
    """Requests read from a file. ``requests`` takes ``count`` of them for a seed: a window of
    consecutive requests at their own times (scaled by ``time_scale``) when every request has
    one (a trace), else a sample kept in the file's order."""

    pool: tuple[Request, ...]
    where: str
    lines: tuple[int, ...] = ()  # where each request is in the file (its line or entry)
    time_scale: float = 1.0

    @property
    def timed(self) -> bool:
        return bool(self.pool) and all(r.send_at_s is not None for r in self.pool)

    def requests(self, profile: WorkloadProfile, count: int, seed: int) -> list[Request]:
        if count > len(self.pool):
            raise ConfigError(f"{self.where}: {len(self.pool)} requests, but profile "
                              f"{profile.name!r} sends {count} (its warm-up and measured requests)")
        rng = np.random.default_rng(seed)
        if self.timed:
            start = int(rng.integers(0, len(self.pool) - count + 1))
            window = self.pool[start:start + count]
            t0 = window[0].send_at_s or 0.0
            return [Request(r.prompt, r.prompt_len, r.output_len,
                            ((r.send_at_s or 0.0) - t0) * self.time_scale) for r in window]
        picked = sorted(rng.choice(len(self.pool), size=count, replace=False).tolist())
        return [self.pool[i] for i in picked]


def check_fits(source: LoadedRequests, max_model_len: int) -> None:
    """Every request's prompt and output fit the deployment's context, or a one-line error
    naming the request (its line in the file)."""
    for i, r in enumerate(source.pool):
        if r.prompt_len + r.output_len > max_model_len:
            line = source.lines[i] if source.lines else i + 1
            raise fail(source.where, line, f"prompt of {r.prompt_len} tokens + output_len "
                       f"{r.output_len} exceeds the deployment's max model length {max_model_len}")
