"""Every figure autotune draws, as a matplotlib PNG (Agg backend): the front of a study, and the
capacity curves (each SLO metric against the load probed, the limit, the boundary found). Draws
from records it is given; computes no finding."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from autotune.core.analysis.study_data import StudyData
from autotune.core.metrics.registry import label_of, unit_of
from autotune.core.metrics.slo import Slo, parse_limit
from autotune.core.trial.capacity_search import CapacitySearch, boundary_text, by_load
from autotune.core.trial.outcome import TrialOutcome

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


def plot_front(data: StudyData, path: Path) -> None:
    """The plane of the first two objectives: every feasible trial with its interval as error
    bars, the front drawn through its members, reference configs circled and named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ox, oy = data.objectives[0], data.objectives[-1]
    pool, front = data.feasible, data.front()
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)

    def xy(ts: list[TrialOutcome]) -> tuple[list[float], list[float], list[list[float]], list[list[float]]]:
        ex = [data.objective_estimate(t, ox) for t in ts]
        ey = [data.objective_estimate(t, oy) for t in ts]
        return ([e.mean for e in ex], [e.mean for e in ey],
                [[e.mean - e.low for e in ex], [e.high - e.mean for e in ex]],
                [[e.mean - e.low for e in ey], [e.high - e.mean for e in ey]])

    others = [t for t in pool if t not in front]
    if others:
        x, y, xe, ye = xy(others)
        ax.errorbar(x, y, xerr=xe, yerr=ye, fmt="o", color="#9aa5b1", ecolor="#ced4da",
                    markersize=6, capsize=2, label="feasible trials (95% intervals)", zorder=2)
    line = sorted(front, key=lambda t: t.value(ox.profile, ox.metric))
    x, y, xe, ye = xy(line)
    ax.errorbar(x, y, xerr=xe, yerr=ye, fmt="-o", color="#d9480f", ecolor="#f08c5a",
                markersize=8, capsize=3, linewidth=1.5, label="Pareto front", zorder=3)
    refs = [t for t in pool if t.reference]
    if refs:
        x, y, _, _ = xy(refs)
        ax.scatter(x, y, s=140, facecolors="none", edgecolors="#1c7ed6", linewidths=1.6,
                   label="reference configs", zorder=4)
    for t in pool:
        ax.annotate(t.label, (t.value(ox.profile, ox.metric), t.value(oy.profile, oy.metric)),
                    textcoords="offset points", xytext=(6, 4), fontsize=8, color="#343a40")
    better = {True: "lower is better", False: "higher is better"}
    ax.set_xlabel(f"{ox.label}, {better[ox.minimize]}")
    ax.set_ylabel(f"{oy.label}, {better[oy.minimize]}")
    infeasible = len(data.outcomes) - len(pool)
    ax.set_title(f"{len(pool)} feasible trials, {len(front)} on the front"
                 + (f", {infeasible} infeasible not shown" if infeasible else ""), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
