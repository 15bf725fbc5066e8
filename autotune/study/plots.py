"""Capacity curves: each SLO metric against the load probed, the limit, the boundary found.
A matplotlib PNG (Agg backend), written per capacity trial (a dashboard artifact) and for the
front in the report."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from autotune.core.metrics.registry import label_of, unit_of
from autotune.core.metrics.slo import Slo, parse_limit
from autotune.core.trial.capacity_search import CapacitySearch, boundary_text, by_load

COLORS = ("#d9480f", "#1c7ed6", "#2b8a3e", "#862e9c", "#e67700", "#495057")


def plot_capacity(searches: Mapping[str, CapacitySearch], path: Path) -> None:
    """One panel per SLO; one series per labelled search (every probe, repeats included), the
    band between the load that met every SLO and the one that did not, the limit dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    first = next(iter(searches.values()))
    limits: list[Slo] = [parse_limit(t, f"stored SLO {t!r}") for t in first.limits]
    fig, axes = plt.subplots(1, len(limits), figsize=(6.5 * len(limits), 4.5), dpi=110,
                             squeeze=False)
    for ax, limit in zip(axes[0], limits, strict=True):
        for (label, search), color in zip(searches.items(), COLORS * 10, strict=False):
            runs = {load: [r[limit.metric] for r in rs if limit.metric in r]
                    for load, rs in by_load(search.probes).items()}
            runs = {load: v for load, v in runs.items() if v}
            ax.scatter([x for x, v in runs.items() for _ in v], [y for v in runs.values() for y in v],
                       s=14, color=color, alpha=0.45)
            ax.plot(list(runs), [sum(v) / len(v) for v in runs.values()], "o-", color=color,
                    markersize=6, linewidth=1.4, label=f"{label}: {boundary_text(search)}")
            b = search.boundary
            if b.found:
                ax.axvspan(b.load, b.fail_load or b.load, color=color, alpha=0.12)
                ax.axvline(b.load, color=color, linestyle=":", linewidth=1)
        ax.axhline(limit.limit, color="#343a40", linestyle="--", linewidth=1,
                   label=f"SLO {limit.text}")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("max concurrency" if first.load == "concurrency" else "request rate (req/s)")
        ax.set_ylabel(f"{label_of(limit.metric)} ({unit_of(limit.metric)})")
        ax.set_title(f"{limit.metric} against load: runs (dots), their mean (line); band: "
                     "met ... not met", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

