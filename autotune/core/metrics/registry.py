"""The registry of metrics: one frozen record per metric autotune knows. Pure.

Every list, label, unit or direction elsewhere is derived from ``METRICS``, so that adding a
metric is one ``_register`` call here plus the code that computes it (a server metric: the call
alone; docs/architecture.md#adding-a-metric). Any registered metric can be an objective or an SLO."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from autotune.errors import ConfigError


class Source(StrEnum):
    """Where a metric's value comes from."""

    BENCHMARK = "benchmark run"  # computed from the run's requests (core.metrics.summary.summarize)
    SERVER = "server /metrics"  # the server under test's /metrics: read before and after a run,
    # its gauges sampled during it (ServerRead)
    SEARCH = "capacity search"  # the load a capacity search found (core.trial.capacity_search)
    CLIENT = "benchmark client"  # the client's own process during the run (shell.bench.client)


class Scale(StrEnum):
    """How two values of a metric are compared in an effect: as a ratio (on the log scale,
    for what is always > 0: throughputs, latencies) or as a difference in the metric's unit
    (for what can be 0 in a run: rates, shares, counts)."""

    RATIO = "ratio"
    DIFFERENCE = "difference"


# Without any repeat in a study: identical runs on these machines differ by 6-12% in throughput
# and E2EL (docs/noise.md) and by far more in TTFT; a log-sd of 0.08 (and 0.5
# for TTFT) keeps the assumed intervals on the honest side of that.
ASSUMED_LOG_SD = 0.08
ASSUMED_LOG_SD_TTFT = 0.5


class Reading(StrEnum):
    """How a server metric is made of the /metrics reads of a run (core.metrics.summary)."""

    GAUGE_PEAK = "the highest value of a gauge sampled during the run"
    GAUGE_MEAN = "the mean of a gauge sampled during the run"
    HISTOGRAM_MEAN = "the mean observation during the run: the histogram's _sum over its _count"


@dataclass(frozen=True)
class ServerRead:
    """Where in the server's /metrics a metric is read, and how (``factor``: to its unit)."""

    family: str  # vLLM's name
    reading: Reading
    factor: float = 1.0


@dataclass(frozen=True)
class Count:
    """A server counter whose increase over a run is kept with the run under ``key``."""

    key: str  # vLLM bench serve's key for it
    family: str  # the counter's sample in /metrics (``..._total``), summed over its label sets


@dataclass(frozen=True)
class CounterRatio:
    """A server metric made of two counters' increases over a run (read before and after it):
    ``offset + numerator / denominator * factor``, both increases kept with it; absent where
    the server lacks either counter or the denominator did not move (the feature was off)."""

    numerator: Count
    denominator: Count
    factor: float = 1.0
    offset: float = 0.0


class Role(StrEnum):
    """What a metric stands for where a line has room for one throughput and one latency (a
    trial's one-line result) or one throughput (what a capacity search's incumbent carried)."""

    THROUGHPUT = "throughput"
    LATENCY = "latency"


@dataclass(frozen=True)
class Metric:
    """Everything autotune knows about one metric."""

    key: str
    unit: str
    higher_is_better: bool
    label: str
    grows_with_load: bool = False  # carried load: a capacity search may stop early on it
    source: Source = Source.BENCHMARK
    assumed_log_sd: float = ASSUMED_LOG_SD
    summary: bool = False  # one of the few shown per profile in notes and checks
    detail: bool = False  # a further statistic of a distribution (std, median, p50, p90)
    effect_scale: Scale = Scale.RATIO
    table: bool = False  # a column of a recorded table (core.analysis.table): part of its layout
    role: Role | None = None
    server_read: ServerRead | None = None  # read from /metrics by its record (Source.SERVER)
    counter_ratio: CounterRatio | None = None  # or made of two of its counters (Source.SERVER)
    # Its kind, for the rules that compute it from the requests (core.trial.precision,
    # core.trial.early_fail, the capacity search's goodput): the per-request latency it
    # summarises (one of LATENCIES; "" none), the statistic over every request's values (mean,
    # std, median, p50, p90, p99; "" for one over a subset: TTFT by prompt length) and, for a
    # percentile, its quantile.
    latency: str = ""
    statistic: str = ""

    @property
    def quantile(self) -> float | None:
        """The quantile of a percentile (median: 0.5, p99: 0.99); None for any other metric."""
        if self.statistic == "median":
            return 0.5
        return float(self.statistic[1:]) / 100.0 if self.statistic[:1] == "p" else None

    @property
    def direction(self) -> str:
        """Optuna's word for the better way."""
        return "maximize" if self.higher_is_better else "minimize"


METRICS: dict[str, Metric] = {}


def _register(metric: Metric) -> None:
    assert metric.key not in METRICS, metric.key
    assert not (metric.server_read and metric.counter_ratio), f"{metric.key}: one way to read it"
    METRICS[metric.key] = metric


for _key, _label, _unit in (("output_throughput", "output throughput", "tok/s"),
                            ("total_token_throughput", "total token throughput", "tok/s"),
                            ("request_throughput", "request throughput", "req/s"),
                            ("request_goodput", "goodput", "req/s")):
    _register(Metric(_key, _unit, True, _label, grows_with_load=True,
                     summary=_key == "output_throughput",
                     table=_key in ("output_throughput", "request_throughput"),
                     role=Role.THROUGHPUT if _key == "output_throughput" else None,
                     # no request may meet the SLOs: goodput 0
                     effect_scale=Scale.DIFFERENCE if _key == "request_goodput" else Scale.RATIO))
_register(Metric("capacity_load", "load", True, "load carried", grows_with_load=True,
                 source=Source.SEARCH))
# What each request measures (``core.metrics.summary``): ITL's values are every token gap of
# every request, the others one value per request.
LATENCIES = ("ttft", "tpot", "itl", "e2el")
for _m, _name in zip(LATENCIES, ("TTFT", "TPOT", "ITL", "E2EL"), strict=True):
    for _stat in ("mean", "median", "std", "p50", "p90", "p99"):
        _register(Metric(f"{_stat}_{_m}_ms", "ms", False, f"{_stat} {_name}", latency=_m, statistic=_stat,
                         assumed_log_sd=ASSUMED_LOG_SD_TTFT if _m == "ttft" else ASSUMED_LOG_SD,
                         summary=_stat == "mean" and _m != "itl",
                         detail=_stat not in ("mean", "p99"),
                         table=(_stat == "mean" and _m != "itl") or (_stat == "p99" and _m in ("ttft", "e2el")),
                         role=Role.LATENCY if (_stat, _m) == ("mean", "e2el") else None))
# TTFT by prompt length: where long prompts wait (chunked prefill, batched tokens) shows here.
PROMPT_BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 256), (256, 1024), (1024, 4096), (4096, None))


def bucket_key(low: int, high: int | None) -> str:
    return f"median_ttft_ms_prompt_{low}_{high}" if high else f"median_ttft_ms_prompt_{low}_up"


for _low, _high in PROMPT_BUCKETS:
    _register(Metric(bucket_key(_low, _high), "ms", False,
                     f"median TTFT of prompts of {_low}-{_high or ''} tokens",
                     assumed_log_sd=ASSUMED_LOG_SD_TTFT, detail=True, latency="ttft"))
# Speculative decoding over the run, from the server's counters (as vLLM's benchmark reads them).
_DRAFTS = Count("spec_decode_num_drafts", "vllm:spec_decode_num_drafts_total")
_DRAFT_TOKENS = Count("spec_decode_draft_tokens", "vllm:spec_decode_num_draft_tokens_total")
_ACCEPTED = Count("spec_decode_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_total")
_register(Metric("spec_decode_acceptance_rate", "%", True, "draft acceptance rate",
                 source=Source.SERVER, assumed_log_sd=0.2, effect_scale=Scale.DIFFERENCE,
                 counter_ratio=CounterRatio(_ACCEPTED, _DRAFT_TOKENS, factor=100.0)))
_register(Metric("spec_decode_acceptance_length", "tokens", True, "tokens per step",
                 source=Source.SERVER, assumed_log_sd=0.2,
                 counter_ratio=CounterRatio(_ACCEPTED, _DRAFTS, offset=1.0)))  # 1 + accepted per draft
# The share of prompt tokens the server found in its prefix cache during the run.
_register(Metric("prefix_cache_hit_rate", "%", True, "prefix-cache hit rate",
                 source=Source.SERVER, assumed_log_sd=0.2, effect_scale=Scale.DIFFERENCE,
                 counter_ratio=CounterRatio(Count("prefix_cache_hit_tokens", "vllm:prefix_cache_hits_total"),
                                            Count("prefix_cache_queried_tokens",
                                                  "vllm:prefix_cache_queries_total"), factor=100.0)))
# KV-cache usage over the run (a share of the cache's blocks in use; headroom is better): how
# close a configuration runs to preempting requests.
for _stat, _reading in (("peak", Reading.GAUGE_PEAK), ("mean", Reading.GAUGE_MEAN)):
    _register(Metric(f"{_stat}_kv_cache_usage_pct", "%", False, f"{_stat} KV-cache usage",
                     source=Source.SERVER, assumed_log_sd=0.2, effect_scale=Scale.DIFFERENCE,
                     server_read=ServerRead("vllm:kv_cache_usage_perc", _reading, 100.0)))
# The server's own latencies over the run, from its histograms (the referee of the client's):
# each says which clock it spans. vLLM 0.32's names (vllm/v1/metrics/loggers.py, stats.py).
for _key, _family, _label in (
        ("server_mean_ttft_ms", "vllm:time_to_first_token_seconds",
         "server mean TTFT (API server: request arrival to the output step of its first token)"),
        ("server_mean_e2el_ms", "vllm:e2e_request_latency_seconds",
         "server mean E2EL (API server: request arrival to the output step of its last token)"),
        ("server_mean_itl_ms", "vllm:inter_token_latency_seconds",
         "server mean ITL (engine core: between a request's output steps)"),
        ("server_mean_tpot_ms", "vllm:request_time_per_output_token_seconds",
         "server mean TPOT (engine core: first to last token step / (tokens - 1); 0 for one token)")):
    _register(Metric(_key, "ms", False, _label, source=Source.SERVER, detail=True,
                     assumed_log_sd=ASSUMED_LOG_SD_TTFT if "ttft" in _key else ASSUMED_LOG_SD,
                     server_read=ServerRead(_family, Reading.HISTOGRAM_MEAN, 1000.0)))
# What the client itself cost: a client short of CPU inflates the latencies it measures.
_register(Metric("client_cpu_s", "s", False, "benchmark client CPU time (its process, during the run)",
                 source=Source.CLIENT))

SUMMARY_METRICS: tuple[str, ...] = tuple(k for k, m in METRICS.items() if m.summary)
TABLE_METRICS: tuple[str, ...] = tuple(k for k, m in METRICS.items() if m.table)
# The gauges sampled during each run (at least once a second: shell.bench.server_metrics).
SAMPLED_GAUGES: tuple[str, ...] = tuple(dict.fromkeys(
    m.server_read.family for m in METRICS.values()
    if m.server_read and m.server_read.reading in (Reading.GAUGE_PEAK, Reading.GAUGE_MEAN)))
THROUGHPUT_METRIC, LATENCY_METRIC = (next(k for k, m in METRICS.items() if m.role is r)
                                     for r in (Role.THROUGHPUT, Role.LATENCY))
# What one run measures, for tables of runs: every metric but the further statistics.
RUN_METRICS: tuple[str, ...] = tuple(k for k, m in METRICS.items()
                                     if not m.detail and m.source is not Source.SEARCH)


def metric(key: str, where: str = "") -> Metric:
    """The registered metric ``key``; a one-line error naming ``where`` otherwise."""
    found = METRICS.get(key)
    if found is None:
        examples = "output_throughput, mean_e2el_ms, p99_ttft_ms, prefix_cache_hit_rate"
        raise ConfigError(f"{where + ': ' if where else ''}unknown metric {key!r}; valid: "
                          f"{examples}, ... ({len(METRICS)} in all: vLLM bench serve's keys)")
    return found


def unit_of(key: str) -> str:
    """The unit of a registered metric (a key it does not know: no unit)."""
    return METRICS[key].unit if key in METRICS else ""


def label_of(key: str) -> str:
    return METRICS[key].label if key in METRICS else key
