"""``jsonl``: a request per line, as vLLM's ``custom`` dataset reads it, plus token ids and times.
Each line holds ``prompt`` (text) or ``prompt_token_ids``, and ``output_len`` (or
``output_tokens``, vLLM's name, so that one file serves both benchmarks); ``timestamp_ms`` (from
the trace's start) is optional, on every line or on none. Blank lines are skipped."""

from __future__ import annotations

from typing import Any

from autotune.core.workload.datasets.common import LoadedRequests, Tokenizer, fail, json_lines, need_tokenizer
from autotune.core.workload.profiles import DatasetSpec
from autotune.core.workload.requests import Request

OPTIONS: dict[str, Any] = {"time_scale": 1.0}


def _int(raw: Any, where: str, line: int, field: str, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise fail(where, line, f"{field} must be an integer >= {minimum}, got {raw!r}")
    return raw


def parse(text: str, where: str, tokenizer: Tokenizer | None) -> LoadedRequests:
    requests, lines = [], []
    for number, item in json_lines(text, where, '{"prompt": "...", "output_len": 128}'):
        field = "output_tokens" if "output_len" not in item and "output_tokens" in item else "output_len"
        output_len = _int(item.get(field), where, number, field, 1)
        if "prompt_token_ids" in item:
            ids = item["prompt_token_ids"]
            if not isinstance(ids, list) or not ids or not all(
                    isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise fail(where, number, "prompt_token_ids must be a non-empty list of token ids")
            prompt: str | tuple[int, ...] = tuple(ids)
            length = len(ids)
        elif isinstance(item.get("prompt"), str) and item["prompt"]:
            prompt = item["prompt"]
            length = len(need_tokenizer(tokenizer, where).encode(prompt, add_special_tokens=False))
        else:
            raise fail(where, number, "no prompt: give prompt (text) or prompt_token_ids")
        at = item.get("timestamp_ms")
        if at is not None and (isinstance(at, bool) or not isinstance(at, int | float) or at < 0):
            raise fail(where, number, f"timestamp_ms must be a number >= 0, got {at!r}")
        requests.append(Request(prompt, length, output_len, None if at is None else at / 1000.0))
        lines.append(number)
    if not requests:
        raise fail(where, None, "no request in the file")
    timed = [r.send_at_s is not None for r in requests]
    if any(timed) and not all(timed):
        first = lines[timed.index(not timed[0])]
        raise fail(where, first, "timestamp_ms must be on every line or on none")
    return LoadedRequests(tuple(requests), where, tuple(lines))


def build(spec: DatasetSpec, text: str | None, tokenizer: Tokenizer | None, where: str
          ) -> LoadedRequests:
    loaded = parse(text or "", where, tokenizer)
    return LoadedRequests(loaded.pool, where, loaded.lines, float(spec.options["time_scale"]))
