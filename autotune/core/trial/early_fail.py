"""When a capacity probe's fail is settled before all its requests are measured: an exact count,
with no distributional assumption. Pure: the client asks it, it sends nothing.

Once N - floor(q (N - 1)) of the N planned requests are past the judge's bar, the run's q-th
percentile is past it whatever the rest measure. A pass is never settled early: one failed
request still to come fails the load (docs/capacity.md, "What a probe's verdict costs")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.core.metrics.registry import METRICS
from autotune.core.metrics.slo import Slo
from autotune.core.metrics.summary import RequestResult, tpot_s

# The latencies a count of requests settles: one value per request. ITL's percentiles are over
# every token gap, which no count of requests past a bar decides.
_PER_REQUEST = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class FailBar:
    """One run fails ``limit`` beyond the noise once the ``quantile`` of its requests'
    ``latency`` ("ttft", "tpot" or "e2el") is past ``bar_ms``."""

    limit: str
    latency: str
    quantile: float
    bar_ms: float

    def count_past(self, results: Sequence[RequestResult]) -> int:
        """How many of ``results`` are past the bar: the successful requests whose latency, as
        the run's summary counts it (no TPOT for one token), is over ``bar_ms``. Only the
        latency asked for, in one pass: the client asks after every completion."""
        if self.latency == "ttft":
            seconds = [r.ttft_s for r in results if r.success]
        elif self.latency == "e2el":
            seconds = [r.latency_s for r in results if r.success]
        else:
            seconds = [tpot_s(r) for r in results if r.success]
        bar = self.bar_ms
        return sum(1 for s in seconds if s is not None and s * 1000.0 > bar)

    def needed(self, planned: int) -> int:
        """Requests past the bar that settle the fail of a run of ``planned``."""
        return planned - math.floor(self.quantile * (planned - 1))


@dataclass(frozen=True)
class SettleRule:
    """The bars of a capacity profile's limits that a count can settle (percentiles of TTFT,
    TPOT and E2EL under ``<=``; a mean or a throughput waits for the whole run)."""

    bars: tuple[FailBar, ...]

    def settled(self, results: Sequence[RequestResult], planned: int) -> str:
        """Why the run of ``planned`` requests already fails its load, given ``results`` (the
        requests measured so far); "" while the verdict is open."""
        failed = sum(not r.success for r in results)
        if failed:
            return f"{failed} failed request(s) after {len(results)} of {planned}"
        for bar in self.bars:
            past = bar.count_past(results)
            if past >= bar.needed(planned):
                return (f"{bar.limit}: {past} of {planned} requests past {bar.bar_ms:.4g} ms "
                        f"after {len(results)}")
        return ""


def fail_rule(limits: Sequence[Slo], band: float) -> SettleRule:
    """The rule for ``limits`` where one run fails a load once its value is past the limit by
    more than ``band`` (a log margin)."""
    bars = []
    for lim in limits:
        m = METRICS[lim.metric]
        if m.quantile is not None and m.latency in _PER_REQUEST and lim.op == "<=":
            bars.append(FailBar(lim.text, m.latency, m.quantile, lim.limit * math.exp(band)))
    return SettleRule(tuple(bars))
