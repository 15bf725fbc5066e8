"""``sharegpt``: the ShareGPT JSON layout, read as vLLM's benchmark reads it
(``ShareGPTDataset``): a list of entries with ``conversations`` (``from``/``value`` turns);
entries with fewer than two turns are dropped; the first turn is the prompt and the second the
reply, whose token count is the output length; pairs are kept as vLLM's ``is_valid_sequence``
keeps them: prompt and reply of at least 4 tokens, prompt under 1024 and prompt + reply under
2048 tokens.
"""

from __future__ import annotations

import json
from typing import Any

from autotune.core.workload.datasets.common import LoadedRequests, Tokenizer, fail, need_tokenizer
from autotune.core.workload.profiles import DatasetSpec
from autotune.core.workload.requests import Request

OPTIONS: dict[str, Any] = {"min_len": 4, "max_prompt_len": 1024, "max_total_len": 2048}


def build(spec: DatasetSpec, text: str | None, tokenizer: Tokenizer | None, where: str
          ) -> LoadedRequests:
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise fail(where, exc.lineno, f"not JSON ({exc.msg}); expected ShareGPT's list of "
                   "conversations") from None
    if not isinstance(data, list):
        raise fail(where, None, "expected a JSON list of entries with conversations")
    tok = need_tokenizer(tokenizer, where)
    o = spec.options
    requests, entries = [], []
    for index, entry in enumerate(data, start=1):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise fail(where, None, f"entry {index}: no conversations list")
        if len(turns) < 2:
            continue
        texts = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
        if not all(isinstance(v, str) for v in texts):
            raise fail(where, None, f"entry {index}: a turn without a text value")
        prompt, reply = texts
        prompt_len = len(tok.encode(prompt, add_special_tokens=False))
        output_len = len(tok.encode(reply, add_special_tokens=False))
        if (prompt_len < o["min_len"] or output_len < o["min_len"] or prompt_len > o["max_prompt_len"]
                or prompt_len + output_len > o["max_total_len"]):
            continue
        requests.append(Request(prompt, prompt_len, output_len))
        entries.append(index)
    if not requests:
        raise fail(where, None, "no conversation passes vLLM's ShareGPT filter (two turns, "
                   f"each >= {o['min_len']} tokens, prompt <= {o['max_prompt_len']}, "
                   f"total <= {o['max_total_len']})")
    return LoadedRequests(tuple(requests), f"{where} (entry numbers)", tuple(entries))
