"""The benchmark client: real streaming requests against an OpenAI-compatible vLLM server.

The only module that speaks HTTP to a server under test (aiohttp, as `vllm bench serve`: it
costs a fraction of httpx's CPU per streamed chunk, and a client that competes with the API
server for a core inflates the very latencies it measures). It sends a profile's prompts with
bounded concurrency and an optional Poisson/gamma arrival process, times every streamed chunk,
and hands the per-request records to ``core.metrics``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np

from autotune.core.metrics import (
    DEFAULT_PERCENTILES,
    BenchmarkSummary,
    RequestResult,
    SloLimits,
    SpecDecodeStats,
    parse_spec_decode_counters,
    spec_decode_delta,
    summarize,
)
from autotune.core.profiles import WorkloadProfile
from autotune.core.prompts import random_prompts, request_lengths
from autotune.core.sse import parse_sse_line
from autotune.errors import BenchmarkError

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True)
class Target:
    """A server to benchmark. The API key is never printed (repr=False)."""

    url: str
    model: str
    api_key: str = field(default="", repr=False)
    endpoint: str = "completions"
    request_timeout_s: float = 300.0

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class BenchmarkRun:
    """One measured run of one profile: the summary and what produced it."""

    profile: WorkloadProfile
    seed: int
    summary: BenchmarkSummary
    requests: tuple[RequestResult, ...] = ()  # the measured requests, in send order


def _payload(target: Target, prompt: list[int] | str, profile: WorkloadProfile,
             output_len: int | None = None) -> dict:
    tokens = output_len or profile.output_len
    body: dict = {
        "model": target.model,
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "temperature": profile.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if target.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


async def send_request(
    session: aiohttp.ClientSession, target: Target, prompt: list[int] | str, prompt_len: int,
    profile: WorkloadProfile, output_len: int | None = None,
) -> RequestResult:
    """One streamed request; any failure becomes a failed record, never an exception."""
    url = target.url.rstrip("/") + ENDPOINTS[target.endpoint]
    start = time.perf_counter()
    ttft, last, tokens, itl = 0.0, start, None, []
    got_token, error = False, ""
    try:
        async with session.post(
            url, json=_payload(target, prompt, profile, output_len), headers=target.headers(),
            timeout=aiohttp.ClientTimeout(total=target.request_timeout_s),
        ) as resp:
            if resp.status != 200:
                body = (await resp.read()).decode(errors="replace")
                error = f"HTTP {resp.status}: {body[:300]}"
            else:
                pending = b""
                async for data in resp.content.iter_any():
                    now = time.perf_counter()  # one arrival time for every event in this read
                    pending += data
                    *events, pending = pending.split(b"\n\n")
                    for event in events:
                        chunk = parse_sse_line(event.decode())
                        if chunk is None:
                            continue
                        if chunk.error:
                            error = f"error chunk: {chunk.error}"
                            break
                        if chunk.has_tokens:
                            if got_token:
                                itl.append(now - last)
                            else:
                                ttft, got_token = now - start, True
                            last = now
                        if chunk.completion_tokens is not None:
                            tokens = chunk.completion_tokens
                    if error:
                        break
    except TimeoutError:
        error = f"timed out after {target.request_timeout_s:g} s"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {exc}"
    if not error and not got_token:
        error = "stream ended without any token"
    if error:
        return RequestResult(prompt_len=prompt_len, start_s=start, success=False, error=error,
                             latency_s=time.perf_counter() - start)
    return RequestResult(
        prompt_len=prompt_len, start_s=start, success=True,
        output_tokens=tokens if tokens is not None else len(itl) + 1,
        ttft_s=ttft, latency_s=last - start, itl_s=tuple(itl),
    )


def arrival_gaps_s(profile: WorkloadProfile, count: int, seed: int) -> list[float]:
    """Gaps between request sends: zeros at an infinite rate, else gamma-distributed with
    mean 1/rate and shape ``burstiness`` (1.0 is a Poisson process), as vLLM's benchmark."""
    if math.isinf(profile.request_rate):
        return [0.0] * count
    rng = np.random.default_rng(seed + 1)
    theta = 1.0 / (profile.request_rate * profile.burstiness)
    return rng.gamma(profile.burstiness, theta, size=count).tolist()


async def _fetch_spec_decode(session: aiohttp.ClientSession, target: Target) -> SpecDecodeStats | None:
    try:
        async with session.get(target.url.rstrip("/") + "/metrics", headers=target.headers(),
                               timeout=aiohttp.ClientTimeout(total=10)) as resp:
            text = await resp.text()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError):
        return None
    return parse_spec_decode_counters(text) if status == 200 else None


async def _run_batch(
    client: aiohttp.ClientSession, target: Target, prompts: Sequence[list[int] | str],
    lengths: Sequence[int], outputs: Sequence[int], profile: WorkloadProfile,
    gaps: Sequence[float], on_done: Callable[[], None],
) -> list[RequestResult]:
    """Send every prompt; requests still open at the profile's time limit count as failed."""
    sem = asyncio.Semaphore(profile.max_concurrency)
    deadline = time.perf_counter() + profile.timeout_s

    async def limited(i: int) -> RequestResult:
        start = time.perf_counter()
        try:
            async with sem:
                result = await asyncio.wait_for(
                    send_request(client, target, prompts[i], lengths[i], profile, outputs[i]),
                    timeout=max(deadline - time.perf_counter(), 0.001),
                )
        except TimeoutError:
            result = RequestResult(
                prompt_len=lengths[i], start_s=start, success=False,
                latency_s=time.perf_counter() - start,
                error=f"run time limit of {profile.timeout_s:g} s reached",
            )
        on_done()
        return result

    tasks = []
    for i, gap in enumerate(gaps):
        if gap > 0:
            await asyncio.sleep(gap)
        tasks.append(asyncio.create_task(limited(i)))
    return list(await asyncio.gather(*tasks))


async def run_profile_async(
    target: Target, profile: WorkloadProfile, *, seed: int, vocab_size: int,
    slo: SloLimits | None = None, percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    text_prompt: Callable[[list[int]], str] | None = None,
) -> BenchmarkRun:
    """Warm up, then measure one profile. Fresh prompts per ``seed`` defeat prefix caching."""
    if target.endpoint not in ENDPOINTS:
        raise BenchmarkError(f"--endpoint {target.endpoint!r}: valid: {', '.join(ENDPOINTS)}")
    if target.endpoint == "chat" and text_prompt is None:
        raise BenchmarkError("chat endpoint needs a tokenizer to turn prompts into text")
    count = profile.warmup_requests + profile.num_prompts
    lengths, outputs = request_lengths(
        input_len=profile.input_len, output_len=profile.output_len,
        range_ratio=profile.range_ratio, count=count, seed=seed)
    ids = random_prompts(vocab_size=vocab_size, lengths=lengths, count=count, seed=seed)
    prompts: list[list[int] | str] = [text_prompt(p) for p in ids] if text_prompt else list(ids)
    warm, measured = profile.warmup_requests, profile.num_prompts
    connector = aiohttp.TCPConnector(limit=profile.max_concurrency + 2, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                     timeout=aiohttp.ClientTimeout(total=None)) as client:
        if warm:
            await _run_batch(client, target, prompts[:warm], lengths[:warm], outputs[:warm],
                             profile, [0.0] * warm, lambda: None)
        before = await _fetch_spec_decode(client, target)
        done = 0

        def tick() -> None:
            nonlocal done
            done += 1
            on_progress(done, measured)

        gaps = arrival_gaps_s(profile, measured, seed)
        start = time.perf_counter()
        results = await _run_batch(
            client, target, prompts[warm:], lengths[warm:], outputs[warm:], profile, gaps, tick
        )
        duration = time.perf_counter() - start
        after = await _fetch_spec_decode(client, target)
    summary = summarize(results, duration, percentiles=percentiles, slo=slo,
                        spec_decode=spec_decode_delta(before, after))
    return BenchmarkRun(profile=profile, seed=seed, summary=summary, requests=tuple(results))


def run_profile(target: Target, profile: WorkloadProfile, **kwargs) -> BenchmarkRun:
    """Synchronous wrapper of :func:`run_profile_async`."""
    return asyncio.run(run_profile_async(target, profile, **kwargs))
