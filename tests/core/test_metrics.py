"""Metric math on hand-made timestamps, with vLLM bench serve's definitions."""

from __future__ import annotations

import pytest

from autotune.core.metrics.prometheus import MetricsPage, parse_metrics
from autotune.core.metrics.registry import METRICS, Count, CounterRatio, Metric, Source
from autotune.core.metrics.summary import (
    RequestResult,
    SloLimits,
    burst_delivered,
    flat_metrics,
    max_concurrency,
    server_values,
    summarize,
    to_vllm_json,
)


def ok(start: float, ttft: float, itl: tuple[float, ...], tokens: int, prompt: int = 10):
    return RequestResult(prompt_len=prompt, start_s=start, success=True, output_tokens=tokens,
                         ttft_s=ttft, latency_s=ttft + sum(itl), itl_s=itl)


def test_tpot_excludes_the_first_token_and_skips_single_token_requests():
    a = ok(0.0, 0.1, (0.02, 0.02, 0.02), tokens=4)  # (0.16 - 0.1) / 3 = 20 ms
    b = ok(0.0, 0.5, (), tokens=1)  # one token: no TPOT sample at all
    s = summarize([a, b], duration_s=1.0)
    assert s.tpot.mean_ms == pytest.approx(20.0)
    assert s.ttft.mean_ms == pytest.approx(300.0)
    assert s.e2el.mean_ms == pytest.approx((160.0 + 500.0) / 2)


def test_itl_is_flattened_over_requests():
    a = ok(0.0, 0.1, (0.01, 0.03), tokens=3)
    b = ok(0.0, 0.1, (0.05,), tokens=2)
    s = summarize([a, b], duration_s=1.0)
    assert s.itl.mean_ms == pytest.approx(30.0)  # mean of 10, 30, 50
    assert s.itl.median_ms == pytest.approx(30.0)


def test_percentiles_and_std_follow_numpy_linear_interpolation():
    results = [ok(0.0, t / 1000.0, (), tokens=1) for t in range(1, 101)]
    s = summarize(results, duration_s=10.0, percentiles=(50, 90, 99))
    assert s.ttft.percentiles_ms[99] == pytest.approx(99.01)
    assert s.ttft.percentiles_ms[90] == pytest.approx(90.1)
    assert s.ttft.std_ms == pytest.approx(28.866, abs=1e-3)


def test_throughputs_divide_by_wall_time_and_count_only_successes():
    good = ok(0.0, 0.1, (0.1,), tokens=2, prompt=100)
    bad = RequestResult(prompt_len=100, start_s=0.0, success=False, error="HTTP 500: boom")
    s = summarize([good, good, bad], duration_s=2.0)
    assert (s.completed, s.failed) == (2, 1)
    assert s.output_throughput_tok_s == pytest.approx(2.0)
    assert s.request_throughput_req_s == pytest.approx(1.0)
    assert s.total_token_throughput_tok_s == pytest.approx((200 + 4) / 2.0)


def test_a_run_with_a_failed_request_is_invalid_and_says_why():
    bad = RequestResult(prompt_len=1, start_s=0.0, success=False, error="HTTP 500: engine dead")
    s = summarize([ok(0.0, 0.1, (), 1), bad], duration_s=1.0)
    assert not s.valid
    assert s.invalid_reason == "1 of 2 requests failed: HTTP 500: engine dead"


def test_goodput_counts_requests_meeting_every_limit():
    fast = ok(0.0, 0.05, (0.01,), tokens=2)
    slow_first_token = ok(0.0, 0.5, (0.01,), tokens=2)
    s = summarize([fast, slow_first_token], duration_s=2.0, slo=SloLimits(ttft_ms=100))
    assert s.goodput_req_s == pytest.approx(0.5)
    assert summarize([fast], duration_s=1.0).goodput_req_s is None


def test_max_concurrency_is_the_peak_overlap_and_touching_intervals_do_not_overlap():
    a = ok(0.0, 1.0, (), 1)
    b = ok(0.5, 1.0, (), 1)
    c = ok(1.0, 1.0, (), 1)  # starts when a ends
    assert max_concurrency([a, b, c]) == 2


def test_vllm_json_uses_bench_serve_key_names():
    s = summarize([ok(0.0, 0.1, (0.02,), 2)], duration_s=1.0)
    j = to_vllm_json(s)
    for key in ("output_throughput", "mean_e2el_ms", "p99_ttft_ms", "median_tpot_ms",
                "std_itl_ms", "request_throughput", "total_token_throughput", "completed"):
        assert key in j
    assert flat_metrics(s)["mean_ttft_ms"] == pytest.approx(100.0)


PROMETHEUS = """
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 30.0
vllm:spec_decode_num_drafts_created 1.7e9
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250.0
"""
BEFORE = MetricsPage(counters={
    "vllm:spec_decode_num_drafts_total": 10.0, "vllm:spec_decode_num_draft_tokens_total": 10.0,
    "vllm:spec_decode_num_accepted_tokens_total": 0.0,
    "vllm:prefix_cache_queries_total": 200.0, "vllm:prefix_cache_hits_total": 50.0})


def only(values: dict[str, float], prefix: str) -> dict[str, float]:
    return {k: v for k, v in values.items() if k.startswith(prefix)}


def test_spec_decode_counters_are_parsed_and_differenced():
    after = parse_metrics(PROMETHEUS)
    assert after.counters["vllm:spec_decode_num_accepted_tokens_total"] == 30.0  # per-position kept apart
    assert only(server_values(BEFORE, after, []), "spec_decode") == {
        "spec_decode_acceptance_rate": 100.0, "spec_decode_acceptance_length": 2.0,
        "spec_decode_num_drafts": 30, "spec_decode_draft_tokens": 30, "spec_decode_accepted_tokens": 30}
    assert only(server_values(MetricsPage(), parse_metrics("vllm:num_requests_running 1"), []),
                "spec_decode") == {}
    assert only(server_values(after, after, []), "spec_decode") == {}  # nothing drafted during the run


def test_prefix_cache_hit_rate_is_the_share_of_queried_tokens_found_during_the_run():
    found = server_values(BEFORE, parse_metrics(PROMETHEUS), [])
    assert only(found, "prefix_cache") == {"prefix_cache_hit_rate": 25.0,
                                           "prefix_cache_queried_tokens": 800, "prefix_cache_hit_tokens": 200}
    s = summarize([ok(0.0, 0.1, (0.01,), tokens=2)], duration_s=1.0, server=found)
    assert flat_metrics(s)["prefix_cache_hit_rate"] == pytest.approx(25.0)
    no_cache = MetricsPage(counters={k: v for k, v in BEFORE.counters.items() if "prefix" not in k})
    assert only(server_values(no_cache, no_cache, []), "prefix_cache") == {}
    assert "prefix_cache_hit_rate" not in flat_metrics(summarize([ok(0.0, 0.1, (0.01,), tokens=2)], 1.0))


def test_a_counter_ratio_added_to_the_registry_is_read_with_no_other_edit():
    preempted = Metric("preemptions_per_request", "", False, "preemptions per request",
                       source=Source.SERVER, counter_ratio=CounterRatio(
                           Count("num_preemptions", "vllm:num_preemptions_total"),
                           Count("num_requests", "vllm:request_success_total")))
    registry = METRICS | {preempted.key: preempted}  # a copy: the real registry is left as it is
    before = MetricsPage(counters={"vllm:num_preemptions_total": 2.0, "vllm:request_success_total": 10.0})
    after = MetricsPage(counters={"vllm:num_preemptions_total": 5.0, "vllm:request_success_total": 22.0})
    assert only(server_values(before, after, [], registry), "num_") == {"num_preemptions": 3,
                                                                        "num_requests": 12}
    assert server_values(before, after, [], registry)["preemptions_per_request"] == 0.25
    assert "preemptions_per_request" not in server_values(before, after, [])


def test_a_stream_delivered_in_one_burst_is_counted_and_streamed_ones_are_not():
    streamed = ok(0.0, 0.02, (0.003, 0.003, 0.003), tokens=4)
    burst = ok(0.0, 0.5, (0.0, 0.0, 0.00002), tokens=4)  # every chunk in one read: TTFT = E2EL
    one_late_gap = ok(0.0, 0.02, (0.0, 0.3, 0.0), tokens=4)  # a stall mid-stream still streams
    assert [burst_delivered(r) for r in (streamed, burst, one_late_gap)] == [False, True, False]
    s = summarize([streamed, burst, one_late_gap], duration_s=1.0)
    assert s.delivery_bursts == 1 and to_vllm_json(s)["delivery_bursts"] == 1


def test_ttft_is_also_given_per_prompt_length_bucket():
    short = RequestResult(prompt_len=100, start_s=0.0, success=True, output_tokens=2, ttft_s=0.01,
                          latency_s=0.02, itl_s=(0.01,))
    long = RequestResult(prompt_len=3000, start_s=0.0, success=True, output_tokens=2, ttft_s=0.2,
                         latency_s=0.21, itl_s=(0.01,))
    flat = flat_metrics(summarize([short, long, long], duration_s=1.0))
    assert flat["median_ttft_ms_prompt_0_256"] == pytest.approx(10.0)
    assert flat["median_ttft_ms_prompt_1024_4096"] == pytest.approx(200.0)
    assert "median_ttft_ms_prompt_256_1024" not in flat  # no prompt there
