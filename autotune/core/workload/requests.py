"""The workload seam: what the benchmark client sends, as records, and where they come from. Pure.
The client knows requests only as ``Request`` records from a ``RequestSource`` and never makes a
prompt: a source turns a profile, a count and a seed into requests (``RandomPrompts``, as vLLM's
random dataset; formats that read a file implement the same Protocol). ``send_offsets_s`` decides
when each goes: at the time the request carries (a trace), else by the profile's arrival process."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from autotune.core.workload.profiles import WorkloadProfile


@dataclass(frozen=True)
class Request:
    """One request to send: text or token ids, its length in tokens, the tokens to generate,
    and (for a trace) when to send it, in seconds from the start of the run."""

    prompt: str | tuple[int, ...]
    prompt_len: int
    output_len: int
    send_at_s: float | None = None


class RequestSource(Protocol):
    """Where a profile's requests come from. A source whose requests carry their own send
    times (a trace) says so with a ``timed`` attribute that is true (``LoadedRequests``); its
    runs send every request (``core.trial.precision.stops_early``)."""

    def requests(self, profile: WorkloadProfile, count: int, seed: int) -> list[Request]:
        """``count`` requests for ``profile``; the same seed gives the same requests."""
        ...


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


@dataclass(frozen=True)
class RandomPrompts:
    """Random token-id prompts of the profile's lengths over a vocabulary: fresh for every
    seed, so a prefix cache finds nothing to reuse."""

    vocab_size: int

    def requests(self, profile: WorkloadProfile, count: int, seed: int) -> list[Request]:
        lengths, outputs = request_lengths(
            input_len=profile.input_len, output_len=profile.output_len,
            range_ratio=profile.range_ratio, count=count, seed=seed)
        ids = random_prompts(vocab_size=self.vocab_size, lengths=lengths, count=count, seed=seed)
        return [Request(tuple(p), n, out) for p, n, out in zip(ids, lengths, outputs, strict=True)]


def arrival_gaps_s(profile: WorkloadProfile, count: int, seed: int) -> list[float]:
    """Gaps between request sends: zeros at an infinite rate, else gamma-distributed with
    mean 1/rate and shape ``burstiness`` (1.0 is a Poisson process), as vLLM's benchmark."""
    if math.isinf(profile.request_rate):
        return [0.0] * count
    rng = np.random.default_rng(seed + 1)
    theta = 1.0 / (profile.request_rate * profile.burstiness)
    return rng.gamma(profile.burstiness, theta, size=count).tolist()


def send_offsets_s(requests: Sequence[Request], profile: WorkloadProfile, seed: int) -> list[float]:
    """When each request is sent, in seconds from the start of the run: the request's own time
    where every request has one, else the profile's arrival process (the first at 0)."""
    if requests and all(r.send_at_s is not None for r in requests):
        first = min(r.send_at_s for r in requests if r.send_at_s is not None)
        return [float(r.send_at_s) - first for r in requests if r.send_at_s is not None]
    gaps = arrival_gaps_s(profile, len(requests), seed)
    return np.cumsum([0.0, *gaps[1:]]).tolist() if gaps else []
