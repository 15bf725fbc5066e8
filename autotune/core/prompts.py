"""Random prompts of an exact token length, as token-id lists. Pure and seeded."""

from __future__ import annotations

import numpy as np


def random_prompts(
    *, vocab_size: int, input_len: int, count: int, seed: int, reserved_ids: int = 3
) -> list[list[int]]:
    """``count`` prompts of ``input_len`` ids drawn uniformly from the vocabulary.

    Ids below ``reserved_ids`` (special tokens such as BOS/EOS/UNK) are never drawn. Sent as
    id lists, the prompts need no tokenizer round trip, so their length is exact.
    """
    if vocab_size <= reserved_ids:
        raise ValueError(f"vocab_size {vocab_size} leaves no ids above {reserved_ids} to draw")
    rng = np.random.default_rng(seed)
    ids = rng.integers(reserved_ids, vocab_size, size=(count, input_len))
    return ids.tolist()
