"""Random prompts of exact token lengths, as token-id lists, and their lengths. Pure and seeded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def request_lengths(*, input_len: int, output_len: int, range_ratio: float, count: int,
                    seed: int) -> tuple[list[int], list[int]]:
    """Input and output lengths of ``count`` requests: fixed, or with ``range_ratio`` r uniform
    integers in [len x (1 - r), len x (1 + r)] as vLLM's random dataset draws them."""
    if range_ratio == 0:
        return [input_len] * count, [output_len] * count
    rng = np.random.default_rng(seed + 7)

    def draw(n: int) -> list[int]:
        low, high = max(1, int(n * (1 - range_ratio))), max(1, int(n * (1 + range_ratio)))
        return rng.integers(low, high + 1, size=count).tolist()

    return draw(input_len), draw(output_len)


def random_prompts(
    *, vocab_size: int, input_len: int = 0, count: int, seed: int, reserved_ids: int = 3,
    lengths: Sequence[int] | None = None,
) -> list[list[int]]:
    """``count`` prompts of ``input_len`` ids (or of ``lengths[i]`` ids each) drawn uniformly
    from the vocabulary.

    Ids below ``reserved_ids`` (special tokens such as BOS/EOS/UNK) are never drawn. Sent as
    id lists, the prompts need no tokenizer round trip, so their length is exact.
    """
    if vocab_size <= reserved_ids:
        raise ValueError(f"vocab_size {vocab_size} leaves no ids above {reserved_ids} to draw")
    rng = np.random.default_rng(seed)
    if lengths is not None and len(set(lengths)) == 1:
        input_len, lengths = lengths[0], None
    if lengths is None:
        return rng.integers(reserved_ids, vocab_size, size=(count, input_len)).tolist()
    return [rng.integers(reserved_ids, vocab_size, size=n).tolist() for n in lengths]
