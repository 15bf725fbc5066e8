"""Every figure autotune draws, as a matplotlib PNG (Agg backend): the front of a study, each
pick's latency against load, and the capacity curves (each SLO metric against the load probed,
the limit, the boundary found). Draws from records it is given (``plot_data``'s and the
capacity searches); computes no finding."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from autotune.core.analysis.recommendation import counted
from autotune.core.metrics.registry import label_of, unit_of
from autotune.core.metrics.slo import Slo, parse_limit
from autotune.core.trial.capacity_search import CapacitySearch, boundary_text, by_load
from autotune.study.output.plot_data import FrontPlot, FrontPoint, LoadCurve

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


def plot_front(front: FrontPlot, path: Path) -> None:
    """The plane of the first and last objectives (``plot_data.front_plot``): every feasible
    trial with its intervals as error bars, the front drawn through its members, references
    circled, the recommended picks starred, each label where ``front_plot`` placed it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)

    def bars(points: list[FrontPoint], fmt: str, **style) -> None:
        ax.errorbar([p.x for p in points], [p.y for p in points],
                    xerr=[[p.x - p.x_interval[0] for p in points], [p.x_interval[1] - p.x for p in points]],
                    yerr=[[p.y - p.y_interval[0] for p in points], [p.y_interval[1] - p.y for p in points]],
                    fmt=fmt, **style)

    others = [p for p in front.points if not p.on_front]
    if others:
        bars(others, "o", color="#9aa5b1", ecolor="#ced4da", markersize=6, capsize=2,
             label="feasible trials (95% intervals)", zorder=2)
    line = sorted((p for p in front.points if p.on_front), key=lambda p: p.x)
    if line:
        bars(line, "-o", color="#d9480f", ecolor="#f08c5a", markersize=8, capsize=3,
             linewidth=1.5, label="Pareto front", zorder=3)
    refs = [p for p in front.points if p.reference]
    if refs:
        ax.scatter([p.x for p in refs], [p.y for p in refs], s=140, facecolors="none",
                   edgecolors="#1c7ed6", linewidths=1.6, label="reference configs", zorder=4)
    picks = [p for p in front.points if p.picked_for]
    if picks:
        ax.scatter([p.x for p in picks], [p.y for p in picks], s=320, marker="*", color="#fab005",
                   edgecolors="#343a40", linewidths=0.8, label="recommended", zorder=5)
    for p in front.points:
        dx, dy = p.label_at
        ax.annotate(p.label, (p.x, p.y), textcoords="offset points", xytext=(dx, dy),
                    ha="right" if dx < 0 else "left", va="bottom", fontsize=8,
                    color="#343a40", fontweight="bold" if p.picked_for else "normal")
    ax.set_xlabel(front.x_title)
    ax.set_ylabel(front.y_title)
    ax.set_title(f"{counted(len(front.points), 'feasible trial')}, {len(line)} on the front"
                 + (f", {front.infeasible} infeasible not shown" if front.infeasible else ""),
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_load(curve: LoadCurve, path: Path) -> None:
    """A pick's latency against concurrency (``plot_data.load_curves``): each fixed profile's
    mean with its 95% interval, each capacity probe a dot and their mean per load a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    probes = [p for p in curve.points if p.low is None]
    if probes:
        ax.scatter([p.load for p in probes], [p.latency for p in probes], s=16, color="#1c7ed6",
                   alpha=0.5, label="capacity probes (one run each)")
        by_load: dict[float, list[float]] = {}
        for p in probes:
            by_load.setdefault(p.load, []).append(p.latency)
        ax.plot(list(by_load), [sum(v) / len(v) for v in by_load.values()], "-", color="#1c7ed6",
                linewidth=1.2)
    for p, color in zip([p for p in curve.points if p.low is not None], COLORS, strict=False):
        ax.errorbar([p.load], [p.latency], yerr=[[p.latency - (p.low or p.latency)],
                                                 [(p.high or p.latency) - p.latency]],
                    fmt="s", color=color, markersize=8, capsize=4,
                    label=f"{p.source} (mean, 95% interval)")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("max concurrency")
    ax.set_ylabel(f"{label_of(curve.metric)} ({unit_of(curve.metric)})")
    ax.set_title(curve.title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
