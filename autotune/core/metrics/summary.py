"""Benchmark metrics: per-request records (and the server's /metrics pages around the run) in,
one summary record out. Pure numpy. As ``vllm bench serve`` (docs/fidelity.md#metric-definitions):
TTFT to the first streamed chunk with tokens; ITL between consecutive chunks, over all requests;
TPOT (E2EL - TTFT) / (output tokens - 1), from requests with more than one; throughputs over the
measured run's wall time. Goodput counts requests meeting every SLO limit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.core.metrics.prometheus import MetricsPage
from autotune.core.metrics.registry import (
    LATENCIES,
    METRICS,
    PROMPT_BUCKETS,
    Count,
    CounterRatio,
    Metric,
    Reading,
    bucket_key,
)

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
# Token chunks closer than this arrived in one read of the socket: the server sent them at once.
BURST_GAP_S = 1e-4


@dataclass(frozen=True)
class RequestResult:
    """One request as the client saw it. Times are seconds on one monotonic clock."""

    prompt_len: int
    start_s: float
    success: bool
    output_tokens: int = 0
    ttft_s: float = 0.0
    latency_s: float = 0.0  # end-to-end: request sent to last byte
    itl_s: tuple[float, ...] = ()
    error: str = ""
    done_s: float | None = None  # when the client saw it end and freed its slot (precision.recheck)


@dataclass(frozen=True)
class LatencyStats:
    """Distribution of one latency metric, in milliseconds."""

    mean_ms: float
    median_ms: float
    std_ms: float
    percentiles_ms: Mapping[float, float] = field(default_factory=dict)

    @classmethod
    def of(cls, values_s: Sequence[float], percentiles: Sequence[float]) -> LatencyStats:
        """Stats of ``values_s`` (seconds) in ms; an empty input gives zeros as vLLM does."""
        ms = np.asarray(values_s, dtype=float) * 1000.0
        if ms.size == 0:
            ms = np.zeros(1)
        # Every percentile from one call: the same values as one call each, a third the time.
        found = np.percentile(ms, list(percentiles)) if percentiles else ()
        return cls(
            mean_ms=float(np.mean(ms)),
            median_ms=float(np.median(ms)),
            std_ms=float(np.std(ms)),
            percentiles_ms={p: float(v) for p, v in zip(percentiles, found, strict=True)},
        )


@dataclass(frozen=True)
class SloLimits:
    """Goodput limits in ms; None means no limit on that metric."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def is_empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2el_ms is None


@dataclass(frozen=True)
class BenchmarkSummary:
    """The result of one measured run of one profile against one server."""

    duration_s: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput_req_s: float
    output_throughput_tok_s: float
    total_token_throughput_tok_s: float
    max_concurrent_requests: int
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2el: LatencyStats
    goodput_req_s: float | None = None
    errors: tuple[str, ...] = ()  # distinct error messages of failed requests
    delivery_bursts: int = 0  # successful requests whose whole stream arrived at once
    ttft_by_prompt_len: Mapping[str, float] = field(default_factory=dict)  # bucket key -> median ms
    # registered server metrics and the counter increases behind them (server_values)
    server: Mapping[str, float] = field(default_factory=dict)
    server_samples: int = 0  # /metrics pages sampled during the run
    client_cpu_s: float | None = None  # CPU seconds of the client's process during the run

    @property
    def valid(self) -> bool:
        """A run is valid only if every request succeeded: failures are never averaged away."""
        return self.failed == 0 and self.completed > 0

    @property
    def invalid_reason(self) -> str:
        if self.valid:
            return ""
        if self.completed == 0 and self.failed == 0:
            return "no request completed"
        first = self.errors[0] if self.errors else "unknown error"
        return f"{self.failed} of {self.failed + self.completed} requests failed: {first}"


def tpot_s(result: RequestResult) -> float | None:
    """Time per output token after the first (None for a request of at most one token)."""
    if result.output_tokens <= 1:
        return None
    return (result.latency_s - result.ttft_s) / (result.output_tokens - 1)


def burst_delivered(result: RequestResult) -> bool:
    """The whole stream arrived in one burst: every gap between token chunks is below
    BURST_GAP_S. Its TTFT is then its E2EL and its TPOT near zero, whatever the engine did:
    seen on these 2-core machines for 40% of requests in some runs, with `vllm bench serve`'s
    client as with ours (see docs/fidelity.md). E2EL and throughput are unaffected."""
    return result.success and len(result.itl_s) >= 2 and max(result.itl_s) < BURST_GAP_S


def max_concurrency(results: Sequence[RequestResult]) -> int:
    """Most requests in flight at one instant (ends sort before starts at equal times)."""
    events = sorted(  # (time, step): -1 sorts before 1
        [(r.start_s, 1) for r in results] + [(r.start_s + r.latency_s, -1) for r in results])
    level = peak = 0
    for _, step in events:
        level += step
        if level > peak:
            peak = level
    return peak


def _meets_slo(result: RequestResult, slo: SloLimits) -> bool:
    checks = [
        (slo.ttft_ms, result.ttft_s),
        (slo.tpot_ms, tpot_s(result) or 0.0),
        (slo.e2el_ms, result.latency_s),
    ]
    return all(limit is None or value * 1000.0 <= limit for limit, value in checks)


def summarize(
    results: Sequence[RequestResult],
    duration_s: float,
    *,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo: SloLimits | None = None,
    server: Mapping[str, float] | None = None,
    server_samples: int = 0,
    client_cpu_s: float | None = None,
) -> BenchmarkSummary:
    """Summarize the measured requests of one run that took ``duration_s`` of wall time."""
    ok = [r for r in results if r.success]
    failed = [r for r in results if not r.success]
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    output_tokens = sum(r.output_tokens for r in ok)
    input_tokens = sum(r.prompt_len for r in ok)
    tpots = [t for t in (tpot_s(r) for r in ok) if t is not None]
    itls = [gap for r in ok for gap in r.itl_s]
    goodput = None
    if slo is not None and not slo.is_empty():
        goodput = sum(_meets_slo(r, slo) for r in ok) / duration_s
    return BenchmarkSummary(
        duration_s=duration_s,
        completed=len(ok),
        failed=len(failed),
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        request_throughput_req_s=len(ok) / duration_s,
        output_throughput_tok_s=output_tokens / duration_s,
        total_token_throughput_tok_s=(input_tokens + output_tokens) / duration_s,
        max_concurrent_requests=max_concurrency(results),
        ttft=LatencyStats.of([r.ttft_s for r in ok], percentiles),
        tpot=LatencyStats.of(tpots, percentiles),
        itl=LatencyStats.of(itls, percentiles),
        e2el=LatencyStats.of([r.latency_s for r in ok], percentiles),
        goodput_req_s=goodput,
        errors=tuple(dict.fromkeys(r.error for r in failed)),
        delivery_bursts=int(sum(burst_delivered(r) for r in ok)),
        ttft_by_prompt_len=ttft_by_prompt_len(ok),
        server=dict(server or {}),
        server_samples=server_samples,
        client_cpu_s=client_cpu_s,
    )


def ttft_by_prompt_len(ok: Sequence[RequestResult]) -> dict[str, float]:
    """Median TTFT (ms) of the requests in each prompt-length bucket that has any."""
    out = {}
    for low, high in PROMPT_BUCKETS:
        inside = [r.ttft_s for r in ok if r.prompt_len >= low and (high is None or r.prompt_len < high)]
        if inside:
            out[bucket_key(low, high)] = float(np.median(inside)) * 1000.0
    return out


def _pct_key(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def to_vllm_json(summary: BenchmarkSummary) -> dict[str, object]:
    """The summary under ``vllm bench serve``'s key names, so existing tooling reads it."""
    out: dict[str, object] = {
        "duration": summary.duration_s,
        "completed": summary.completed,
        "failed": summary.failed,
        "total_input_tokens": summary.total_input_tokens,
        "total_output_tokens": summary.total_output_tokens,
        "request_throughput": summary.request_throughput_req_s,
        "request_goodput": summary.goodput_req_s,
        "output_throughput": summary.output_throughput_tok_s,
        "total_token_throughput": summary.total_token_throughput_tok_s,
        "max_concurrent_requests": summary.max_concurrent_requests,
        "delivery_bursts": summary.delivery_bursts,  # autotune's own key (not vLLM's)
        **summary.ttft_by_prompt_len,  # autotune's own keys
    }
    for name in LATENCIES:
        stats: LatencyStats = getattr(summary, name)
        out[f"mean_{name}_ms"] = stats.mean_ms
        out[f"median_{name}_ms"] = stats.median_ms
        out[f"std_{name}_ms"] = stats.std_ms
        for p, value in stats.percentiles_ms.items():
            out[f"p{_pct_key(p)}_{name}_ms"] = value
    out.update(summary.server)
    if summary.server_samples:
        out["server_samples"] = summary.server_samples  # autotune's own key
    if summary.client_cpu_s is not None:
        out["client_cpu_s"] = summary.client_cpu_s
    out["valid"] = summary.valid
    out["invalid_reason"] = summary.invalid_reason
    out["errors"] = list(summary.errors)
    return out


def flat_metrics(summary: BenchmarkSummary) -> dict[str, float]:
    """Every numeric metric under its vLLM key: what trials store and objectives read."""
    return {
        k: float(v)
        for k, v in to_vllm_json(summary).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _increase(before: MetricsPage, after: MetricsPage, count: Count) -> int | None:
    """How much a counter grew between two reads; None where either read lacks it."""
    if count.family not in before.counters or count.family not in after.counters:
        return None
    return int(after.counters[count.family] - before.counters[count.family])


def _counter_ratio(before: MetricsPage, after: MetricsPage, key: str, ratio: CounterRatio
                   ) -> dict[str, float]:
    """A ``CounterRatio`` metric under ``key`` with the two increases it is made of, or nothing."""
    num = _increase(before, after, ratio.numerator)
    den = _increase(before, after, ratio.denominator)
    if num is None or not den:
        return {}
    return {key: ratio.offset + num / den * ratio.factor,
            ratio.numerator.key: num, ratio.denominator.key: den}


def server_values(before: MetricsPage, after: MetricsPage, samples: Sequence[MetricsPage],
                  metrics: Mapping[str, Metric] = METRICS) -> dict[str, float]:
    """Every metric of ``metrics`` (the registry) read from the server, from the /metrics pages
    read before and after a run (a histogram's observations, a counter's increase in between)
    and those sampled during it (a gauge: over its engines too); a metric the server does not
    expose, or that saw nothing during the run, is left out."""
    out: dict[str, float] = {}
    for key, m in metrics.items():
        if m.counter_ratio is not None:
            out |= _counter_ratio(before, after, key, m.counter_ratio)
        read = m.server_read
        if read is None:
            continue
        if read.reading is Reading.HISTOGRAM_MEAN:
            found = after.histograms.get(read.family)
            mean = found.minus(before.histograms.get(read.family)).mean if found else None
            if mean is not None:
                out[key] = mean * read.factor
            continue
        seen = [page.gauges[read.family] for page in samples if page.gauges.get(read.family)]
        if not seen:
            continue
        if read.reading is Reading.GAUGE_PEAK:
            out[key] = max(max(values) for values in seen) * read.factor
        elif read.reading is Reading.GAUGE_MEAN:
            out[key] = float(np.mean([np.mean(values) for values in seen])) * read.factor
    return out
