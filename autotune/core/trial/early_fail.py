"""When a capacity probe's fail is settled before all its requests are measured: an exact
count over the requests so far. Pure: the client asks it, it sends nothing.

The q-th percentile of N values (numpy's, linear) lies between the sorted values at 0-based
indices i = floor(q (N - 1)) and i + 1. Once N - i requests of the N planned are past a bar,
the run's percentile is past it whatever the others measure, and so is the percentile of the
requests measured so far (N - floor(q (N - 1)) does not fall as N grows): the verdict of the
full run, with no distributional assumption. The bar is the judge's own
(``capacity_search.judge_load``): the limit times exp(z x noise), past which one run fails its
load beyond the noise. A failed request fails the load at once. A pass is never settled early:
a request still to come may fail, and one failed request fails the load.
"""

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

    def value_ms(self, r: RequestResult) -> float | None:
        """This request's latency, as the run's summary counts it (None: not counted)."""
        if not r.success:
            return None
        # Only the latency asked for: the rule asks after every completion, of every request.
        seconds = (r.ttft_s if self.latency == "ttft" else r.latency_s if self.latency == "e2el"
                   else tpot_s(r))
        return None if seconds is None else seconds * 1000.0

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
            past = sum(1 for r in results if (v := bar.value_ms(r)) is not None and v > bar.bar_ms)
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
