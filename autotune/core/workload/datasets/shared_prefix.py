"""``shared-prefix``: generated groups of prompts that share a prefix (a system prompt or a
document), as SGLang's ``generated-shared-prefix`` and vLLM's ``prefix_repetition`` datasets
make them: ``groups`` prefixes of ``prefix_len`` tokens, each followed in ``prompts_per_group``
prompts by its own ``suffix_len`` tokens, asking ``output_len`` tokens; the prompts of all
groups are shuffled. New prefixes for every seed, so one run's cache does not serve the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.core.workload.datasets.common import (
    Tokenizer,
    allowed_ids,
    need_tokenizer,
    text_of_length,
)
from autotune.core.workload.profiles import DatasetSpec, WorkloadProfile
from autotune.core.workload.requests import Request

OPTIONS: dict[str, Any] = {"groups": 4, "prompts_per_group": 16, "prefix_len": 512,
                           "suffix_len": 64, "output_len": 128, "token_ids": False}


@dataclass(frozen=True)
class SharedPrefix:
    spec: DatasetSpec
    tokenizer: Tokenizer

    def requests(self, profile: WorkloadProfile, count: int, seed: int) -> list[Request]:
        o = self.spec.options
        rng = np.random.default_rng(seed)
        vocab = allowed_ids(self.tokenizer)
        groups = int(o["groups"])
        prefixes = [vocab[rng.integers(0, len(vocab), size=int(o["prefix_len"]))].tolist()
                    for _ in range(groups)]
        out = []
        for i in range(count):  # round-robin over groups, then shuffled
            ids = prefixes[i % groups] + vocab[rng.integers(0, len(vocab), size=int(o["suffix_len"]))].tolist()
            if o["token_ids"]:
                out.append(Request(tuple(ids), len(ids), int(o["output_len"])))
            else:
                text, length = text_of_length(self.tokenizer, ids, len(ids), rng, vocab)
                out.append(Request(text, length, int(o["output_len"])))
        order = rng.permutation(len(out)).tolist()
        return [out[i] for i in order]


def build(spec: DatasetSpec, text: str | None, tokenizer: Tokenizer | None, where: str
          ) -> SharedPrefix:
    return SharedPrefix(spec, need_tokenizer(tokenizer, where))
