"""Reads a server's /metrics page over HTTP for the benchmark client (``shell.bench.client``): once
before and after a run, and its gauges sampled during it. Parsing is ``core.metrics.prometheus``'s;
which gauges, and what they make, is the registry's (``SAMPLED_GAUGES``)."""

from __future__ import annotations

import asyncio

import aiohttp

from autotune.core.metrics.prometheus import MetricsPage, parse_metrics
from autotune.core.metrics.registry import SAMPLED_GAUGES

SAMPLE_INTERVAL_S = 1.0  # on a fixed grid from the run's start: at least one sample a second


async def fetch_metrics(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                        timeout_s: float = 10.0, only: tuple[str, ...] = ()) -> MetricsPage:
    """The server's /metrics page at ``url`` (an empty page when it has none to give)."""
    try:
        async with session.get(url.rstrip("/") + "/metrics", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError):
        return MetricsPage()
    return parse_metrics(text, only) if status == 200 else MetricsPage()


async def sample_gauges(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                        done: asyncio.Event, interval_s: float = SAMPLE_INTERVAL_S
                        ) -> list[MetricsPage]:
    """The registry's gauges read every ``interval_s`` (the first at once) until ``done`` is
    set; reads that found none of them (a server without them, a read that timed out) are
    left out."""
    if not SAMPLED_GAUGES:
        return []
    loop = asyncio.get_running_loop()
    start, samples = loop.time(), []
    while not done.is_set():
        page = await fetch_metrics(session, url, headers, timeout_s=interval_s, only=SAMPLED_GAUGES)
        if page.gauges:
            samples.append(page)
        ticks = (loop.time() - start) // interval_s + 1  # a slow read skips the ticks it missed
        try:
            await asyncio.wait_for(done.wait(), max(start + ticks * interval_s - loop.time(), 0.0))
        except TimeoutError:
            pass
    return samples
