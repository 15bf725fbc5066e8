"""Sample workloads made locally (``autotune make-workload``): their length distributions follow
published statistics of public traces (ShareGPT for ``chat``, Azure's conversation trace for
``rag``, Mooncake for ``agentic``), scaled by ``scale``. Pure: returns the lines of a JSONL or
Mooncake file. The sources and their numbers: docs/workloads.md#sample-data-made-locally."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

WORKLOAD_KINDS = ("chat", "rag", "agentic")
WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at "
         "which but have an they you were her she there been one all we their has would when if "
         "so no what up more out who can said about other into them than some time could its "
         "only new these two may first then do any like my now over such our man me even most "
         "made after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still "
         "own see men work long get here between both life being under never day same another "
         "know while last might us great old year off come since against go came right used take "
         "three system server model token request cache prefix batch memory engine latency").split()


@dataclass(frozen=True)
class Shape:
    """A length distribution: log-normal with this median and log-sd, clipped."""

    median: float
    sigma: float
    low: int
    high: int

    def draw(self, rng: np.random.Generator, n: int, scale: float) -> list[int]:
        raw = rng.lognormal(np.log(self.median * scale), self.sigma, size=n)
        return np.clip(np.rint(raw), self.low, max(self.low, int(self.high * scale))).astype(int).tolist()


def _mean_to_median(mean: float, sigma: float) -> float:
    return mean / float(np.exp(sigma ** 2 / 2))


# Means (ShareGPT, Mooncake) turned into medians for the chosen log-sd; medians (Azure) as given.
CHAT_PROMPT = Shape(_mean_to_median(161, 0.8), 0.8, 4, 2048)
CHAT_OUTPUT = Shape(_mean_to_median(338, 0.8), 0.8, 4, 2048)
SYSTEM_WORDS = 48
RAG_PROMPT = Shape(1020, 0.5, 64, 4096)
RAG_OUTPUT = Shape(129, 0.6, 4, 1024)
AGENT_INPUT = Shape(_mean_to_median(7590, 0.8), 0.8, 256, 128_000)
AGENT_OUTPUT = Shape(_mean_to_median(182, 0.9), 0.9, 4, 4096)


def _text(rng: np.random.Generator, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=max(n, 1)))


def _stamps(rng: np.random.Generator, n: int, rate: float | None) -> list[int | None]:
    if not rate:
        return [None] * n
    return np.rint(np.cumsum(np.concatenate([[0.0], rng.exponential(1000.0 / rate, n - 1)]))
                   ).astype(int).tolist()


def chat(n: int, seed: int, scale: float = 1.0, rate: float | None = None,
         system_prompts: int = 4) -> list[dict]:
    rng = np.random.default_rng(seed)
    systems = [_text(rng, SYSTEM_WORDS) for _ in range(system_prompts)]
    prompts, outputs = CHAT_PROMPT.draw(rng, n, scale), CHAT_OUTPUT.draw(rng, n, scale)
    out = []
    for i, (p, o, at) in enumerate(zip(prompts, outputs, _stamps(rng, n, rate), strict=True)):
        user = _text(rng, max(4, p - SYSTEM_WORDS))  # the system prompt is part of the length
        line = {"prompt": systems[i % system_prompts] + "\n\n" + user, "output_tokens": o}
        out.append(line if at is None else {**line, "timestamp_ms": at})
    return out


def rag(n: int, seed: int, scale: float = 1.0, rate: float | None = None,
        documents: int = 8) -> list[dict]:
    rng = np.random.default_rng(seed)
    lengths = RAG_PROMPT.draw(rng, documents, scale)
    docs = [_text(rng, int(0.9 * m)) for m in lengths]
    outputs = RAG_OUTPUT.draw(rng, n, scale)
    out = []
    for o, at in zip(outputs, _stamps(rng, n, rate), strict=True):
        d = int(rng.integers(0, documents))
        question = _text(rng, max(4, int(0.1 * lengths[d])))
        line = {"prompt": f"Context:\n{docs[d]}\n\nQuestion: {question}", "output_tokens": o}
        out.append(line if at is None else {**line, "timestamp_ms": at})
    return out


def agentic(n: int, seed: int, scale: float = 1.0, rate: float | None = 0.5,
            block_size: int = 512, turns: int = 6) -> list[dict]:
    """Sessions of about ``turns`` requests: a request continues a live session (its blocks
    up to the shorter of the two contexts are that session's) or starts a new one."""
    rng = np.random.default_rng(seed)
    stamps = _stamps(rng, n, rate or 0.5)
    inputs, outputs = AGENT_INPUT.draw(rng, n, scale), AGENT_OUTPUT.draw(rng, n, scale)
    out, next_id = [], 0
    sessions: list[tuple[list[int], int]] = []  # (hash ids, context length)
    for i in range(n):
        blocks = -(-inputs[i] // block_size)
        if sessions and rng.random() > 1 / turns:
            k = int(rng.integers(0, len(sessions)))
            kept = sessions[k][0][:min(inputs[i], sessions[k][1]) // block_size]
        else:
            k, kept = len(sessions), []
            sessions.append(([], 0))
        ids = kept + list(range(next_id, next_id + blocks - len(kept)))
        next_id += blocks - len(kept)
        sessions[k] = (ids, inputs[i])
        if len(sessions) > 16:  # sessions end
            sessions.pop(0)
        out.append({"timestamp": stamps[i], "input_length": inputs[i], "output_length": outputs[i],
                    "hash_ids": ids})
    return out


def lines(kind: str, n: int, seed: int, scale: float = 1.0, rate: float | None = None) -> list[str]:
    made = {"chat": chat, "rag": rag, "agentic": agentic}[kind](n, seed, scale, rate)
    return [json.dumps(item) for item in made]


# The profile that make-workload writes beside its file, per kind.
WORKLOAD_PROFILES = {
    "chat": "  max_concurrency: 8\n  num_prompts: 100\n  warmup_requests: 8\n"
            "  dataset: {format: jsonl, path: %s}\n",
    "rag": "  max_concurrency: 8\n  num_prompts: 100\n  warmup_requests: 8\n"
           "  dataset: {format: jsonl, path: %s}\n",
    "agentic": "  max_concurrency: 64\n  num_prompts: 100\n  warmup_requests: 4\n"
               "  dataset: {format: mooncake, path: %s, time_scale: 1.0}\n",
}


def profile_text(kind: str, file_name: str, *, requests: int, seed: int, scale: float) -> str:
    """The profile YAML written beside a made file: measured requests are those the file holds
    beyond the warm-up (at most 100), since the file holds every request sent."""
    text = WORKLOAD_PROFILES[kind] % file_name
    warm = int(text.split("warmup_requests: ")[1].split()[0])
    measured = max(1, min(100, requests - warm))
    return (f"# written by autotune make-workload {kind}: {requests} requests, seed {seed}, "
            f"scale {scale:g}\n{kind}:\n" + text.replace("num_prompts: 100", f"num_prompts: {measured}"))
