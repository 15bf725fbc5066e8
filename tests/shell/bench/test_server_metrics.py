"""The server's /metrics over a benchmark run: gauges sampled during it (KV-cache usage), its
latency histograms differenced over it (the referee of the client's figures), and the client's
own CPU time.

The server is a stand-in aiohttp server on 127.0.0.1 whose /metrics is scripted: the gauge
peaks only in the middle of the run, between the before and after reads, and the histograms
carry observations from before the run, which a real vLLM cannot be made to do on demand. The
client, the sampler and the parser are the real ones.
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
from autotune.shell.bench.client import Target, run_profile_async
from autotune.shell.bench.server_metrics import SAMPLE_INTERVAL_S
from tests.helpers import stand_in_http

PROFILE = WorkloadProfile(name="t", input_len=8, output_len=3, num_prompts=2, max_concurrency=2,
                          warmup_requests=0)
TOKEN_GAP_S = 0.65  # two gaps per request: the run lasts about 1.3 s
PEAK = 0.9
# What the stand-in's histograms record for each measured request (seconds), on top of what
# they held before the run (10 observations of 1 s each, as from earlier runs).
OBSERVED = {"vllm:time_to_first_token_seconds": [0.05], "vllm:e2e_request_latency_seconds": [1.4],
            "vllm:inter_token_latency_seconds": [0.6, 0.7],
            "vllm:request_time_per_output_token_seconds": [0.65]}
BURN_S = 0.2  # CPU the client burns in its progress callback for each measured request


def histogram(family: str, observed: list[float]) -> str:
    earlier = [1.0] * 10
    values = earlier + observed
    return (f"# TYPE {family} histogram\n"
            f'{family}_bucket{{engine="0",le="0.1",model_name="m"}} {sum(v <= 0.1 for v in values)}\n'
            f'{family}_bucket{{engine="0",le="+Inf",model_name="m"}} {len(values)}\n'
            f'{family}_count{{engine="0",model_name="m"}} {len(values)}\n'
            f'{family}_sum{{engine="0",model_name="m"}} {sum(values)}\n')


def page(usage: float, finished: int) -> str:
    """What vLLM 0.32 writes for the gauge, for two engines (the second at half the first), and
    its histograms after ``finished`` measured requests."""
    return ("# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {usage}\n'
            f'vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} {usage / 2}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
            + "".join(histogram(f, per * finished) for f, per in OBSERVED.items()))


def burn(done: int, total: int) -> None:
    end = time.process_time() + BURN_S
    while time.process_time() < end:
        pass


async def scripted_run() -> tuple[dict[str, float], list[float]]:
    """A run against the stand-in; the usage it served to each /metrics read, in order."""
    served: list[float] = []
    state = {"posts": 0, "in_flight": 0, "first_post": None, "finished": 0}

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
        state["finished"] += not warmup
        return resp

    async def metrics(request: web.Request) -> web.Response:
        if not state["in_flight"]:
            usage = 0.05  # before and after the run (and a read that beats the first request)
        elif time.monotonic() - state["first_post"] > 0.8:
            usage = PEAK
        else:
            usage = 0.2
        served.append(usage)
        return web.Response(text=page(usage, state["finished"]))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    async with stand_in_http(app) as url:
        run = await run_profile_async(Target(url, "m"), PROFILE, seed=0, source=RandomPrompts(100),
                                      on_progress=burn)
    return flat_metrics(run.summary), served


@pytest.fixture(scope="module")
def scripted() -> tuple[dict[str, float], list[float]]:
    return asyncio.run(scripted_run())


def test_the_kv_cache_peak_between_the_before_and_after_reads_is_recorded_with_its_samples(scripted):
    measured, served = scripted
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


def test_the_servers_latencies_are_its_histograms_means_over_the_run_alone(scripted):
    measured, _ = scripted
    for key, family in (("server_mean_ttft_ms", "vllm:time_to_first_token_seconds"),
                        ("server_mean_e2el_ms", "vllm:e2e_request_latency_seconds"),
                        ("server_mean_itl_ms", "vllm:inter_token_latency_seconds"),
                        ("server_mean_tpot_ms", "vllm:request_time_per_output_token_seconds")):
        per_request = OBSERVED[family]
        assert measured[key] == pytest.approx(1000 * sum(per_request) / len(per_request)), key
        assert METRICS[key].server_read.family == family and "(" in METRICS[key].label  # its clock


def test_the_clients_own_cpu_time_during_the_run_is_recorded(scripted):
    measured, _ = scripted
    burnt = BURN_S * PROFILE.num_prompts
    assert burnt <= measured["client_cpu_s"] < burnt + 0.3
    assert METRICS["client_cpu_s"].source is Source.CLIENT
