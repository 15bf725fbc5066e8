"""The server's /metrics over a benchmark run: gauges sampled during it (KV-cache usage).

The server is a stand-in aiohttp server on 127.0.0.1 whose /metrics is scripted: the gauge
peaks only in the middle of the run, between the before and after reads, which a real vLLM
cannot be made to do on demand. The client, the sampler and the parser are the real ones.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from autotune.core.metrics.prometheus import MetricsPage
from autotune.core.metrics.registry import METRICS, SAMPLED_GAUGES, Source
from autotune.core.metrics.summary import flat_metrics, server_values
from autotune.core.workload.profiles import WorkloadProfile
from autotune.core.workload.requests import RandomPrompts
from autotune.shell.client import Target, run_profile_async
from autotune.shell.server_metrics import SAMPLE_INTERVAL_S

PROFILE = WorkloadProfile(name="t", input_len=8, output_len=3, num_prompts=2, max_concurrency=2,
                          warmup_requests=0)
TOKEN_GAP_S = 0.65  # two gaps per request: the run lasts about 1.3 s
PEAK = 0.9


def page(usage: float) -> str:
    """What vLLM 0.32 writes for the gauge, for two engines (the second at half the first)."""
    return ("# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {usage}\n'
            f'vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} {usage / 2}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n')


async def scripted_run() -> tuple[dict[str, float], list[float]]:
    """A run against the stand-in; the usage it served to each /metrics read, in order."""
    served: list[float] = []
    state = {"posts": 0, "in_flight": 0, "first_post": None}

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        state["posts"] += 1
        warmup = state["posts"] <= PROFILE.warmups  # answered at once: the test stays short
        if not warmup:
            state["first_post"] = state["first_post"] or time.monotonic()
            state["in_flight"] += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            if i and not warmup:
                await asyncio.sleep(TOKEN_GAP_S)
            await resp.write(f'data: {{"choices":[{{"text":" t{i}"}}]}}\n\n'.encode())
        await resp.write(b'data: {"choices":[],"usage":{"completion_tokens":3}}\n\ndata: [DONE]\n\n')
        state["in_flight"] -= not warmup
        return resp

    async def metrics(request: web.Request) -> web.Response:
        if not state["in_flight"]:
            usage = 0.05  # before and after the run (and a read that beats the first request)
        elif time.monotonic() - state["first_post"] > 0.8:
            usage = PEAK
        else:
            usage = 0.2
        served.append(usage)
        return web.Response(text=page(usage))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        run = await run_profile_async(Target(f"http://127.0.0.1:{port}", "m"), PROFILE, seed=0,
                                      source=RandomPrompts(100))
    finally:
        await runner.cleanup()
    return flat_metrics(run.summary), served


def test_the_kv_cache_peak_between_the_before_and_after_reads_is_recorded_with_its_samples():
    measured, served = asyncio.run(scripted_run())
    before, during, after = served[0], served[1:-1], served[-1]
    assert before == after == 0.05 and PEAK in during
    assert measured["peak_kv_cache_usage_pct"] == pytest.approx(PEAK * 100)
    # The mean is over the samples and over the engines (the second at half the first).
    assert measured["mean_kv_cache_usage_pct"] == pytest.approx(sum(during) / len(during) * 75)
    assert measured["server_samples"] == len(during)
    # At least once a second over a run of about 1.3 s: a read at once and one after a second.
    assert SAMPLE_INTERVAL_S <= 1.0 and measured["duration"] > 1.2 and len(during) >= 2


def test_a_server_without_the_gauge_gives_no_kv_cache_metric():
    assert server_values(MetricsPage(), MetricsPage(), []) == {}
    assert server_values(MetricsPage(), MetricsPage(), [MetricsPage(gauges={"other": (1.0,)})]) == {}


def test_every_sampled_gauge_comes_from_a_registered_server_metric():
    families = {m.server_read.family for m in METRICS.values() if m.server_read}
    assert set(SAMPLED_GAUGES) <= families and "vllm:kv_cache_usage_perc" in SAMPLED_GAUGES
    assert all(METRICS[k].source is Source.SERVER for k in ("peak_kv_cache_usage_pct",
                                                              "mean_kv_cache_usage_pct"))
