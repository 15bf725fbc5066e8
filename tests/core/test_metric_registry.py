"""The metric registry: every fact about a metric in one record, every list derived from it."""

from __future__ import annotations

import math

import pytest

from autotune.core.analysis import table
from autotune.core.maths.stats import assumed_log_sd
from autotune.core.metrics.prometheus import Histogram, MetricsPage
from autotune.core.metrics.registry import (
    LATENCY_METRIC,
    METRICS,
    SUMMARY_METRICS,
    TABLE_METRICS,
    THROUGHPUT_METRIC,
    Source,
    metric,
    unit_of,
)
from autotune.core.metrics.slo import parse_limit
from autotune.core.metrics.summary import (
    RequestResult,
    flat_metrics,
    server_values,
    summarize,
)
from autotune.core.trial.capacity_search import MONOTONE_IN_LOAD
from autotune.core.trial.objectives import parse_objective
from autotune.errors import ConfigError


def a_run() -> dict[str, float]:
    done = RequestResult(prompt_len=8, start_s=0.0, success=True, output_tokens=4, ttft_s=0.01,
                         latency_s=0.04, itl_s=(0.01, 0.01, 0.01))
    during = [MetricsPage(gauges={"vllm:kv_cache_usage_perc": (0.5,)})]
    counted = {"vllm:spec_decode_num_drafts_total": 4.0, "vllm:spec_decode_num_draft_tokens_total": 4.0,
               "vllm:spec_decode_num_accepted_tokens_total": 3.0, "vllm:prefix_cache_queries_total": 100.0,
               "vllm:prefix_cache_hits_total": 40.0}
    before = MetricsPage(counters=dict.fromkeys(counted, 0.0))
    after = MetricsPage(counters=counted, histograms={f: Histogram({math.inf: 1.0}, 0.01, 1.0) for f in (
        "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
        "vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds")})
    return flat_metrics(summarize([done], 1.0,
                                  server=server_values(before, after, during),
                                  server_samples=len(during), client_cpu_s=0.2))


def test_every_metric_a_run_measures_that_a_user_could_optimise_is_registered():
    counts = {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
              "max_concurrent_requests", "delivery_bursts", "spec_decode_num_drafts",
              "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
              "prefix_cache_queried_tokens", "prefix_cache_hit_tokens", "server_samples"}
    measured = set(a_run())
    assert measured - counts and measured - counts <= set(METRICS)
    server = {k for k, m in METRICS.items() if m.source is Source.SERVER}
    assert server <= measured  # what the registry says comes from /metrics, the run has


@pytest.mark.parametrize(("key", "direction", "unit"), [
    ("mean_e2el_ms", "minimize", "ms"), ("p99_ttft_ms", "minimize", "ms"),
    ("output_throughput", "maximize", "tok/s"), ("request_goodput", "maximize", "req/s"),
    ("prefix_cache_hit_rate", "maximize", "%"), ("capacity_load", "maximize", "load"),
])
def test_direction_and_unit_come_from_the_record(key, direction, unit):
    assert metric(key).direction == direction and unit_of(key) == unit


def test_any_registered_metric_can_be_an_objective_or_an_slo():
    o = parse_objective("chat:prefix_cache_hit_rate", ["chat"])
    assert (o.direction, o.label) == ("maximize", "prefix-cache hit rate at chat (%)")
    assert parse_limit("prefix_cache_hit_rate>=50", "--slo").violation(40.0) == 10.0
    with pytest.raises(ConfigError, match="unknown metric 'speed'; valid: output_throughput"):
        parse_objective("chat:speed", ["chat"])


def test_the_lists_elsewhere_are_derived_from_the_registry():
    assert set(MONOTONE_IN_LOAD) == {k for k, m in METRICS.items() if m.grows_with_load}
    assert "output_throughput" in MONOTONE_IN_LOAD and "mean_e2el_ms" not in MONOTONE_IN_LOAD
    assert SUMMARY_METRICS == ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")
    assert table.TABLE_METRICS is TABLE_METRICS and set(TABLE_METRICS) == {
        "output_throughput", "mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms", "p99_e2el_ms",
        "p99_ttft_ms", "request_throughput"}  # the recorded tables' columns, as recorded
    assert (THROUGHPUT_METRIC, LATENCY_METRIC) == ("output_throughput", "mean_e2el_ms")
    assert assumed_log_sd("p99_ttft_ms") == METRICS["p99_ttft_ms"].assumed_log_sd > assumed_log_sd(
        "mean_e2el_ms")


def test_a_metrics_kind_is_a_field_of_its_record_never_parsed_from_its_key():
    p99_itl, median, mean = METRICS["p99_itl_ms"], METRICS["median_ttft_ms"], METRICS["mean_e2el_ms"]
    assert (p99_itl.latency, p99_itl.statistic, p99_itl.quantile) == ("itl", "p99", 0.99)
    assert median.quantile == METRICS["p50_ttft_ms"].quantile == 0.5
    assert (mean.latency, mean.statistic, mean.quantile) == ("e2el", "mean", None)
    # TTFT by prompt length is a median over a subset of the requests: no statistic of them all
    bucket = METRICS["median_ttft_ms_prompt_0_256"]
    assert (bucket.latency, bucket.statistic, bucket.quantile) == ("ttft", "", None)
    assert METRICS["server_mean_ttft_ms"].latency == ""  # the server's histogram, not the requests
    for m in METRICS.values():
        if m.statistic:
            assert m.key == f"{m.statistic}_{m.latency}_ms"


def test_the_rules_that_read_a_metrics_kind_agree_with_its_record():
    from autotune.core.metrics.slo import parse_limit
    from autotune.core.trial.early_fail import fail_rule
    from autotune.core.trial.precision import pinnable

    # a run's requests pin ITL's percentiles (over every token gap) and its mean ...
    assert pinnable("p99_itl_ms") and pinnable("mean_itl_ms") and pinnable("median_tpot_ms")
    assert not pinnable("std_ttft_ms") and not pinnable("median_ttft_ms_prompt_0_256")
    # ... but a count of requests past a bar settles only a per-request latency's percentile
    bars = fail_rule([parse_limit(t, "test") for t in ("p99_itl_ms<=50", "p90_ttft_ms<=900")], 0.0)
    assert [(b.latency, b.quantile) for b in bars.bars] == [("ttft", 0.9)]
