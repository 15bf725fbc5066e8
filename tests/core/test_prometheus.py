"""The /metrics parser, on pages written by prometheus_client (the library vLLM exposes its
metrics with) and on hand-written pages without ``# TYPE`` lines."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from autotune.core.metrics.prometheus import Histogram as ParsedHistogram
from autotune.core.metrics.prometheus import MetricsPage, parse_metrics


def vllm_like_page() -> str:
    """Two engines, with the label names and metric kinds vLLM 0.32 uses."""
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    queries = Counter("vllm:prefix_cache_queries", "q", labels, registry=registry)
    usage = Gauge("vllm:kv_cache_usage_perc", "u", labels, registry=registry)
    ttft = Histogram("vllm:time_to_first_token_seconds", "t", labels, registry=registry,
                     buckets=(0.1, 1.0))
    for engine, (n, share, observed) in enumerate([(100, 0.25, (0.05, 0.5)), (40, 0.75, (2.0,))]):
        queries.labels('a "quoted", {model}', str(engine)).inc(n)
        usage.labels("m", str(engine)).set(share)
        for x in observed:
            ttft.labels("m", str(engine)).observe(x)
    return generate_latest(registry).decode()


def test_counters_gauges_and_histograms_of_a_prometheus_client_page():
    page = parse_metrics(vllm_like_page())
    assert page == MetricsPage(
        counters={"vllm:prefix_cache_queries_total": 140.0},  # summed over engines, _created left out
        gauges={"vllm:kv_cache_usage_perc": (0.25, 0.75)},  # one value per engine
        histograms={"vllm:time_to_first_token_seconds": ParsedHistogram(
            {0.1: 1.0, 1.0: 2.0, math.inf: 3.0}, sum=2.55, count=3.0)})


def test_a_histograms_delta_over_a_run_and_its_mean():
    before = ParsedHistogram({0.1: 1.0, math.inf: 2.0}, sum=0.5, count=2.0)
    after = ParsedHistogram({0.1: 1.0, math.inf: 5.0}, sum=3.5, count=5.0)
    run = after.minus(before)
    assert run == ParsedHistogram({0.1: 0.0, math.inf: 3.0}, sum=3.0, count=3.0)
    assert run.mean == pytest.approx(1.0)
    assert after.minus(after).mean is None  # nothing observed during the run
    assert after.minus(None) == after


def test_a_page_without_type_lines_is_read_by_the_naming_convention():
    page = parse_metrics("""
vllm:spec_decode_num_drafts_total{engine="0"} 40.0
vllm:spec_decode_num_drafts_created{engine="0"} 1.7e9
vllm:num_requests_running{engine="0"} 3
vllm:num_requests_running{engine="1"} 2 1700000000000
vllm:e2e_request_latency_seconds_bucket{le="1.0"} 4
vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 5
vllm:e2e_request_latency_seconds_sum 6.5
vllm:e2e_request_latency_seconds_count 5
""")
    assert page.counters == {"vllm:spec_decode_num_drafts_total": 40.0}
    assert page.gauges == {"vllm:num_requests_running": (3.0, 2.0)}
    assert page.histograms == {"vllm:e2e_request_latency_seconds": ParsedHistogram(
        {1.0: 4.0, math.inf: 5.0}, sum=6.5, count=5.0)}


@pytest.mark.parametrize("text", ["", "# HELP only a comment", "garbage", "name{unclosed=\"x 1",
                                  "name not-a-number", "name{le=\"x\"} 1"],
                         ids=["empty", "comment", "no-value", "unclosed-label", "bad-value", "odd-label"])
def test_malformed_lines_are_skipped_not_raised(text):
    page = parse_metrics(text + "\nvllm:ok_total 1\n")
    assert page.counters == {"vllm:ok_total": 1.0}


def test_a_counter_typed_under_its_family_name_is_read_under_its_sample_name():
    """The multiprocess collector (vLLM with several API servers) types ``vllm:x`` and
    writes ``vllm:x_total``."""
    page = parse_metrics("# TYPE vllm:prefix_cache_hits counter\n"
                         'vllm:prefix_cache_hits_total{engine="0"} 7.0\n'
                         "# TYPE vllm:kv_cache_usage_perc gauge\n"
                         'vllm:kv_cache_usage_perc{engine="0"} 0.5\n')
    assert page == MetricsPage(counters={"vllm:prefix_cache_hits_total": 7.0},
                               gauges={"vllm:kv_cache_usage_perc": (0.5,)})
