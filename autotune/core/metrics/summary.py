"""Benchmark metrics: per-request records (and the server's /metrics pages read around the run)
in, one summary record out. Pure numpy, no I/O.

Definitions follow vLLM's own ``vllm bench serve`` (``vllm/benchmarks/serve.py``):
TTFT is the time to the first streamed chunk with tokens; ITL is the gap between
consecutive chunks (flattened over requests); TPOT is (E2EL - TTFT) / (output tokens - 1)
and only requests with more than one output token contribute; throughputs divide by the
wall time of the measured run. Goodput counts requests meeting every SLO limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from autotune.core.metrics.prometheus import MetricsPage
from autotune.core.metrics.registry import METRICS, PROMPT_BUCKETS, Reading, bucket_key

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
        return cls(
            mean_ms=float(np.mean(ms)),
            median_ms=float(np.median(ms)),
            std_ms=float(np.std(ms)),
            percentiles_ms={p: float(np.percentile(ms, p)) for p in percentiles},
        )


@dataclass(frozen=True)
class SpecDecodeStats:
    """Speculative decoding over the run, from deltas of the server's /metrics counters."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int

    @property
    def acceptance_rate(self) -> float:
        """Share of proposed tokens that were accepted (0..1)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def acceptance_length(self) -> float:
        """Mean tokens emitted per target-model step: 1 + accepted per draft."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 1.0


@dataclass(frozen=True)
class PrefixCacheStats:
    """Prompt tokens looked up in the server's prefix cache over the run, and those found."""

    queried_tokens: int
    hit_tokens: int

    @property
    def hit_rate(self) -> float:
        """Share of queried prompt tokens found in the cache (0..1)."""
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


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
    spec_decode: SpecDecodeStats | None = None
    prefix_cache: PrefixCacheStats | None = None
    errors: tuple[str, ...] = ()  # distinct error messages of failed requests
    delivery_bursts: int = 0  # successful requests whose whole stream arrived at once
    ttft_by_prompt_len: Mapping[str, float] = field(default_factory=dict)  # bucket key -> median ms
    server: Mapping[str, float] = field(default_factory=dict)  # registered server metrics (server_values)
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
    events = sorted(
        [(r.start_s, 1) for r in results] + [(r.start_s + r.latency_s, -1) for r in results],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
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
    spec_decode: SpecDecodeStats | None = None,
    prefix_cache: PrefixCacheStats | None = None,
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
        spec_decode=spec_decode,
        prefix_cache=prefix_cache,
        errors=tuple(dict.fromkeys(r.error for r in failed)),
        delivery_bursts=sum(burst_delivered(r) for r in ok),
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
    for name in ("ttft", "tpot", "itl", "e2el"):
        stats: LatencyStats = getattr(summary, name)
        out[f"mean_{name}_ms"] = stats.mean_ms
        out[f"median_{name}_ms"] = stats.median_ms
        out[f"std_{name}_ms"] = stats.std_ms
        for p, value in stats.percentiles_ms.items():
            out[f"p{_pct_key(p)}_{name}_ms"] = value
    if summary.spec_decode is not None:
        sd = summary.spec_decode
        out["spec_decode_acceptance_rate"] = sd.acceptance_rate * 100.0
        out["spec_decode_acceptance_length"] = sd.acceptance_length
        out["spec_decode_num_drafts"] = sd.drafts
        out["spec_decode_draft_tokens"] = sd.draft_tokens
        out["spec_decode_accepted_tokens"] = sd.accepted_tokens
    if summary.prefix_cache is not None:
        out["prefix_cache_hit_rate"] = summary.prefix_cache.hit_rate * 100.0
        out["prefix_cache_queried_tokens"] = summary.prefix_cache.queried_tokens
        out["prefix_cache_hit_tokens"] = summary.prefix_cache.hit_tokens
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


def _delta(before: MetricsPage, after: MetricsPage, name: str) -> int | None:
    if name not in before.counters or name not in after.counters:
        return None
    return int(after.counters[name] - before.counters[name])


def spec_decode_delta(before: MetricsPage, after: MetricsPage) -> SpecDecodeStats | None:
    """Speculative decoding between two /metrics reads, as vLLM's benchmark reads it; None
    when the server exposes no such counters or none moved (no speculation)."""
    found = [_delta(before, after, f"vllm:spec_decode_{k}_total")
             for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")]
    if None in found or not found[1]:
        return None
    drafts, draft_tokens, accepted = (int(v or 0) for v in found)
    return SpecDecodeStats(drafts, draft_tokens, accepted)


def prefix_cache_delta(before: MetricsPage, after: MetricsPage) -> PrefixCacheStats | None:
    """Prefix-cache lookups between two /metrics reads (counted in tokens); None when the
    server exposes no such counters or looked nothing up (prefix caching off)."""
    queried = _delta(before, after, "vllm:prefix_cache_queries_total")
    hits = _delta(before, after, "vllm:prefix_cache_hits_total")
    if not queried or hits is None:
        return None
    return PrefixCacheStats(queried, hits)


def server_values(before: MetricsPage, after: MetricsPage, samples: Sequence[MetricsPage]
                  ) -> dict[str, float]:
    """Every registered metric with a ``server_read``, from the /metrics pages read before and
    after a run (a histogram's observations in between) and those sampled during it (a gauge:
    over its engines too); a metric the server does not expose, or that saw nothing during the
    run, is left out."""
    out = {}
    for key, m in METRICS.items():
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
