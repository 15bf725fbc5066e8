"""``mooncake``: a Mooncake trace (Qin et al., FAST '25): per line ``timestamp`` (ms),
``input_length``, ``output_length`` and ``hash_ids``, one per ``block_size``-token block (512 in
Mooncake's). Each id's tokens come from a generator seeded by the id, so shared ids share their
prefix exactly as in the trace; the last block is cut to ``input_length``. Replayed at its times
scaled by ``time_scale`` (0.5: twice as fast); prompts are token ids (``token_ids: true``) or,
with ``token_ids: false``, the text they decode to."""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.core.workload.datasets.common import (
    LoadedRequests,
    Tokenizer,
    allowed_ids,
    fail,
    json_lines,
    need_tokenizer,
)
from autotune.core.workload.profiles import DatasetSpec
from autotune.core.workload.requests import Request

OPTIONS: dict[str, Any] = {"block_size": 512, "time_scale": 1.0, "token_ids": True}
TRACE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def block_tokens(hash_id: int, size: int, vocab: np.ndarray) -> list[int]:
    """The tokens of one block: the same for the same id, whatever request it is in."""
    return vocab[np.random.default_rng(hash_id).integers(0, len(vocab), size=size)].tolist()


def build(spec: DatasetSpec, text: str | None, tokenizer: Tokenizer | None, where: str
          ) -> LoadedRequests:
    o = spec.options
    size = int(o["block_size"])
    if size < 1:
        raise fail(where, None, "block_size must be >= 1")
    tok = need_tokenizer(tokenizer, where)
    vocab = allowed_ids(tok)
    requests, lines = [], []
    example = '{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}'
    for number, item in json_lines(text or "", where, example):
        missing = [f for f in TRACE_FIELDS if f not in item]
        if missing:
            raise fail(where, number, f"missing field(s) {', '.join(missing)}")
        length, output = item["input_length"], item["output_length"]
        for name, value in (("input_length", length), ("output_length", output)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise fail(where, number, f"{name} must be an integer >= 1, got {value!r}")
        ids = item["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise fail(where, number, "hash_ids must be a list of integers")
        if len(ids) * size < length:
            raise fail(where, number, f"input_length {length} needs {-(-length // size)} blocks of "
                       f"{size}; hash_ids has {len(ids)}")
        tokens = [t for h in ids for t in block_tokens(h, size, vocab)][:length]
        prompt: str | tuple[int, ...] = tuple(tokens) if o["token_ids"] else tok.decode(tokens)
        at = item["timestamp"]
        if isinstance(at, bool) or not isinstance(at, int | float) or at < 0:
            raise fail(where, number, f"timestamp must be a number of ms >= 0, got {at!r}")
        requests.append(Request(prompt, length, output, at / 1000.0))
        lines.append(number)
    if not requests:
        raise fail(where, None, "no request in the trace")
    return LoadedRequests(tuple(requests), where, tuple(lines), float(o["time_scale"]))
