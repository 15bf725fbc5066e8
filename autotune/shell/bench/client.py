"""The benchmark client: real streaming requests against an OpenAI-compatible vLLM server.
The only module that speaks HTTP to a server under test; aiohttp, as `vllm bench serve`: it costs
a fraction of httpx's CPU per streamed chunk, and a client that competes with the API server for
a core inflates the very latencies it measures. It sends a source's requests at their send times
with bounded concurrency, times every chunk, reads /metrics before and after
(``shell.bench.server_metrics``) and hands the per-request records to ``core.metrics``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from autotune.core.metrics.sse import parse_sse_line
from autotune.core.metrics.summary import (
    DEFAULT_PERCENTILES,
    BenchmarkSummary,
    RequestResult,
    SloLimits,
    server_values,
    summarize,
)
from autotune.core.trial.precision import (
    TIME_LIMIT_ERROR,
    Pinned,
    RunStop,
    reason_for,
    stops_early,
)
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import Request, RequestSource, send_offsets_s
from autotune.errors import BenchmarkError, ConfigError
from autotune.shell.bench.files import read_model_info
from autotune.shell.bench.server_metrics import fetch_metrics, sample_gauges
from autotune.shell.bench.workloads import load_tokenizer, sources_for

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


def checked_url(text: str) -> str:
    """A server URL of the form http(s)://host[:port]; a one-line error naming --url otherwise
    (a path such as /v1 too: the endpoints' paths are added to it)."""
    try:
        parts = urlsplit(text.strip())
        ok = (parts.scheme in ("http", "https") and bool(parts.hostname)
              and (parts.port is None or parts.port > 0) and parts.path in ("", "/")
              and not parts.query and not parts.fragment)
    except ValueError:  # a port that is not a number, a bracket left open
        ok = False
    if not ok:
        raise ConfigError(f"--url {text!r}: expected http(s)://host[:port], e.g. "
                          "http://127.0.0.1:8000")
    return text.strip()


@dataclass(frozen=True)
class BenchmarkRun:
    """One measured run of one profile: the summary and what produced it."""

    profile: WorkloadProfile
    seed: int
    summary: BenchmarkSummary
    requests: tuple[RequestResult, ...] = ()  # the measured requests, in send order
    stop: RunStop | None = None  # how many were sent and why the run ended


def _payload(target: Target, prompt: list[int] | str, profile: WorkloadProfile,
             output_len: int | None = None) -> dict:
    """The request body ``vllm bench serve`` sends (``endpoint_request_func``): EOS ignored, no
    ``min_tokens`` (which costs vLLM work at every step: 9% of throughput on an H200), the
    sampling temperature in the body as its ``extra_body`` puts it."""
    tokens = output_len or profile.output_len
    body: dict = {"model": target.model}
    if target.endpoint == "chat":
        body |= {"messages": [{"role": "user", "content": prompt}], "max_completion_tokens": tokens}
    else:
        body |= {"prompt": prompt, "repetition_penalty": 1.0, "max_tokens": tokens, "logprobs": None}
    return body | {"stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
                   "temperature": profile.temperature}


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


def check_answers(target: Target, timeout_s: float = 10.0) -> None:
    """One GET of the server's model list: a BenchmarkError in one line where nothing answers
    at ``target.url`` (refused, unknown host, no reply within ``timeout_s``), so that a run
    stops at its first failure rather than after every request failed. Any HTTP answer will
    do (an error status is for the requests to report)."""
    async def probe() -> None:
        async with aiohttp.ClientSession(trust_env=False) as session, session.get(
                target.url.rstrip("/") + "/v1/models", headers=target.headers(),
                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            await resp.read()

    try:
        asyncio.run(probe())
    except TimeoutError:
        raise BenchmarkError(f"{target.url}: no answer within {timeout_s:g} s; is the server "
                             "up and the URL right?") from None
    except aiohttp.ClientError as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise BenchmarkError(f"{target.url}: nothing answers ({reason}); is the server up and "
                             "the URL right?") from None


async def _run_batch(
    client: aiohttp.ClientSession, target: Target, requests: Sequence[Request], *,
    profile: WorkloadProfile, offsets_s: Sequence[float], on_done: Callable[[], None],
    prompt_of: Callable[[Request], list[int] | str],
    stop: Callable[[Sequence[RequestResult]], bool] | None = None,
    until: Pinned | None = None,
) -> tuple[list[RequestResult], str]:
    """Send every request at its offset from now (those open at the time limit fail); returns the
    requests sent, in send order, and why ``until`` stopped the run ('' where it did not).
    ``until`` (a fixed profile's stop rule): nothing more is sent and those in flight are awaited, so
    that the run is what ``vllm bench serve --num-prompts n`` measures. ``stop`` (a capacity probe's
    settled fail): those in flight are cancelled and left out, since awaiting them could cost as much
    as the rest of the run (docs/precision.md#whole-waves-and-no-cancelling, docs/capacity.md)."""
    sem = asyncio.Semaphore(profile.max_concurrency)
    t0 = time.perf_counter()
    deadline = t0 + profile.timeout_s
    done: list[RequestResult] = []
    halted = asyncio.Event()  # stop said yes: cancel what is in flight
    no_more = asyncio.Event()  # send nothing more (halted, or until said precise)
    tasks: list[asyncio.Task[RequestResult | None]] = []
    sent = 0
    early = ""

    async def guarded(r: Request) -> RequestResult | None:
        nonlocal sent
        if no_more.is_set():
            return None
        sent += 1  # in the same step as send_request takes its start time: recheck counts alike
        return await send_request(client, target, prompt_of(r), r.prompt_len, profile, r.output_len)

    async def limited(r: Request) -> RequestResult | None:
        nonlocal early
        start = time.perf_counter()
        try:
            async with sem:
                result = await asyncio.wait_for(
                    guarded(r), timeout=max(deadline - time.perf_counter(), 0.001))
        except TimeoutError:
            result = RequestResult(
                prompt_len=r.prompt_len, start_s=start, success=False,
                latency_s=time.perf_counter() - start,
                error=f"{TIME_LIMIT_ERROR} of {profile.timeout_s:g} s reached",
            )
        if result is None:
            return None
        ended = time.perf_counter()
        result = dataclasses.replace(result, done_s=ended)
        on_done()
        done.append(result)
        if stop is not None and not halted.is_set() and stop(done):
            halted.set()
            no_more.set()
            for task in tasks:
                if task is not asyncio.current_task():
                    task.cancel()  # a no-op on those already done
        if until is not None and not no_more.is_set():
            early = until.stop(done, sent=sent, concurrency=profile.max_concurrency,
                               ceiling=profile.num_prompts,
                               elapsed_s=ended - min(r.start_s for r in done))
            if early:
                no_more.set()
        return result

    for request, offset in zip(requests, offsets_s, strict=True):
        wait = t0 + offset - time.perf_counter()
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(no_more.wait(), wait)
        if no_more.is_set():
            break
        tasks.append(asyncio.create_task(limited(request)))
    if tasks:
        await asyncio.wait(tasks)
    return [r for t in tasks if not t.cancelled() and (r := t.result()) is not None], early


async def run_profile_async(
    target: Target, profile: WorkloadProfile, *, source: RequestSource, seed: int,
    slo: SloLimits | None = None, percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    text_prompt: Callable[[list[int]], str] | None = None,
    stop: Callable[[Sequence[RequestResult]], bool] | None = None,
    until: Pinned | None = None,
) -> BenchmarkRun:
    """Warm up, then measure one profile with requests from ``source``. ``text_prompt`` turns
    token-id prompts into text (the chat endpoint takes only text). ``stop`` ends the measured
    run early, cancelling what is in flight: a capacity probe whose verdict is settled;
    ``until`` ends a fixed profile's run once its numbers are known, awaiting what is in
    flight (see ``_run_batch``)."""
    if target.endpoint not in ENDPOINTS:
        raise BenchmarkError(f"--endpoint {target.endpoint!r}: valid: {', '.join(ENDPOINTS)}")
    if target.endpoint == "chat" and text_prompt is None:
        raise BenchmarkError("chat endpoint needs a tokenizer to turn prompts into text")
    warm, measured = profile.warmups, profile.num_prompts
    requests = source.requests(profile, warm + measured, seed)

    def prompt_of(r: Request) -> list[int] | str:
        if isinstance(r.prompt, str):
            return r.prompt
        return text_prompt(list(r.prompt)) if text_prompt else list(r.prompt)

    connector = aiohttp.TCPConnector(limit=profile.max_concurrency + 2, keepalive_timeout=60)
    async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                     timeout=aiohttp.ClientTimeout(total=None)) as client:
        if warm:
            await _run_batch(client, target, requests[:warm], profile=profile,
                             offsets_s=[0.0] * warm, on_done=lambda: None, prompt_of=prompt_of)
        before = await fetch_metrics(client, target.url, target.headers())
        done = 0

        def tick() -> None:
            nonlocal done
            done += 1
            on_progress(done, measured)

        offsets = send_offsets_s(requests[warm:], profile, seed)
        if not stops_early(profile, source):  # the one decision the plan announces too
            until = None
        finished = asyncio.Event()
        sampler = asyncio.create_task(sample_gauges(client, target.url, target.headers(), finished))
        start, cpu_start = time.perf_counter(), time.process_time()
        results, early = await _run_batch(
            client, target, requests[warm:], profile=profile, offsets_s=offsets, on_done=tick,
            prompt_of=prompt_of, stop=stop, until=until)
        duration, cpu_s = time.perf_counter() - start, time.process_time() - cpu_start
        finished.set()
        samples = await sampler
        after = await fetch_metrics(client, target.url, target.headers())
    summary = summarize(results, duration, percentiles=percentiles, slo=slo,
                        server=server_values(before, after, samples), server_samples=len(samples),
                        client_cpu_s=cpu_s)
    ended = RunStop(len(results), reason_for(results, sent=len(results), ceiling=measured,
                                             early=early),
                    summary.max_concurrent_requests, profile.max_concurrency,
                    until.max_run_s if until is not None else None)
    return BenchmarkRun(profile=profile, seed=seed, summary=summary, requests=tuple(results),
                        stop=ended)


def run_profile(target: Target, profile: WorkloadProfile, **kwargs) -> BenchmarkRun:
    """Synchronous wrapper of :func:`run_profile_async`."""
    return asyncio.run(run_profile_async(target, profile, **kwargs))


@dataclass(frozen=True)
class BenchInputs:
    """What `bench` sends: its fixed profiles, each one's requests, and for the chat endpoint
    the tokenizer's decoder (chat takes text: token-id prompts are decoded)."""

    profiles: tuple[WorkloadProfile, ...]
    sources: Mapping[str, RequestSource]
    text_prompt: Callable[[Sequence[int]], str] | None


def bench_inputs(profiles: Sequence[WorkloadProfile], *, model: str, tokenizer: str | None,
                 vocab_size: int | None, endpoint: str, max_model_len: int) -> BenchInputs:
    """The requests of `bench`'s profiles: with ``tokenizer``'s (else ``model``'s), token ids
    below ``vocab_size`` (else the model's); a capacity profile is refused (it searches)."""
    found = load_tokenizer(tokenizer or model)
    vocab = vocab_size or (found.vocab_size if found is not None else read_model_info(model).vocab_size)
    if endpoint == "chat" and found is None:
        raise ConfigError("--endpoint chat: needs the model's tokenizer (--tokenizer FOLDER)")
    for profile in profiles:
        if profile.capacity is not None:
            raise ConfigError(f"--profile {profile.name}: bench runs fixed workloads; a capacity "
                              f"profile searches its load: `autotune run --profile {profile.name} "
                              "--slo ...`")
    chosen, sources = sources_for(profiles, vocab_size=vocab, tokenizer=found,
                                  max_model_len=max_model_len)
    return BenchInputs(tuple(chosen), sources, found.decode if endpoint == "chat" else None)
