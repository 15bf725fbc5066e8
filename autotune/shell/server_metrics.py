"""Reads a server's /metrics page over HTTP for the benchmark client (``shell.client``); parsing
is ``core.metrics.prometheus``'s. Knows nothing of what the metrics mean."""

from __future__ import annotations

import aiohttp

from autotune.core.metrics.prometheus import MetricsPage, parse_metrics


async def fetch_metrics(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
                        timeout_s: float = 10.0) -> MetricsPage:
    """The server's /metrics page at ``url`` (an empty page when it has none to give)."""
    try:
        async with session.get(url.rstrip("/") + "/metrics", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text()
            status = resp.status
    except (aiohttp.ClientError, TimeoutError):
        return MetricsPage()
    return parse_metrics(text) if status == 200 else MetricsPage()
