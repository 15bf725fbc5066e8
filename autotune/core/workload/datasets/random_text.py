"""``random``: prompts of the profile's lengths (``input_len``, ``output_len``, ``range_ratio``)
made as vLLM's random dataset makes them: consecutive allowed token ids from a seeded offset,
decoded to text and re-tokenized until the length holds (``token_ids: true`` sends the ids
themselves, exactly as long as asked). Fresh for every seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.core.workload.datasets.common import Tokenizer, allowed_ids, need_tokenizer, text_of_length
from autotune.core.workload.profiles import DatasetSpec, WorkloadProfile
from autotune.core.workload.requests import RandomPrompts, Request, request_lengths

OPTIONS: dict[str, Any] = {"token_ids": False}


@dataclass(frozen=True)
class RandomText:
    """Text prompts of exact token length for ``tokenizer`` (as far as re-tokenization allows:
    the drift is the difference between ``Request.prompt_len`` and the length asked)."""

    tokenizer: Tokenizer

    def requests(self, profile: WorkloadProfile, count: int, seed: int) -> list[Request]:
        lengths, outputs = request_lengths(input_len=profile.input_len, output_len=profile.output_len,
                                           range_ratio=profile.range_ratio, count=count, seed=seed)
        rng = np.random.default_rng(seed)
        allowed = allowed_ids(self.tokenizer)
        offsets = rng.integers(0, len(allowed), size=count)
        out = []
        for i, (n, m) in enumerate(zip(lengths, outputs, strict=True)):
            ids = allowed[(int(offsets[i]) + i + np.arange(n)) % len(allowed)].tolist()
            text, length = text_of_length(self.tokenizer, ids, n, rng, allowed)
            out.append(Request(text, length, m))
        return out


def build(spec: DatasetSpec, text: str | None, tokenizer: Tokenizer | None, where: str
          ) -> RandomText | RandomPrompts:
    tok = need_tokenizer(tokenizer, where)
    return RandomPrompts(tok.vocab_size) if spec.options["token_ids"] else RandomText(tok)
