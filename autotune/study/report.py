"""`autotune report`: a Markdown and HTML report with Pareto plots, importance and effects.

Builds one document (sections of paragraphs, tables and images) from the study and renders it
twice, so the Markdown and the HTML cannot disagree. Plots are matplotlib PNGs (Agg backend).
"""

from __future__ import annotations

import html
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.core.analysis import (
    E2EL,
    THROUGHPUT,
    USES,
    TrialRecord,
    beyond_noise,
    delta_pct,
    differing_params,
    effects,
    failures_by_class,
    pareto_front,
    recommend,
    sign_flips,
)
from autotune.core.objectives import UNITS
from autotune.errors import ConfigError
from autotune.study.records import baseline_of, profiles_of, records


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (file name, alt text)


def _fmt(v: float, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


def _label(r: TrialRecord) -> str:
    return f"#{r.number}" + (f" {r.reference}" if r.reference else "")


def plot_front(recs: list[TrialRecord], profile: str, path: Path) -> None:
    """Throughput vs mean E2EL of every feasible trial; front highlighted, references named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pool = [r for r in recs if r.feasible and profile in r.metrics]
    front = pareto_front(recs, profile)
    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=110)
    others = [r for r in pool if r not in front]
    ax.scatter([r.value(profile, E2EL) for r in others], [r.value(profile, THROUGHPUT) for r in others],
               s=36, color="#9aa5b1", label="feasible trials", zorder=2)
    fx = [r.value(profile, E2EL) for r in sorted(front, key=lambda r: r.value(profile, E2EL))]
    fy = [r.value(profile, THROUGHPUT) for r in sorted(front, key=lambda r: r.value(profile, E2EL))]
    ax.plot(fx, fy, "-o", color="#d9480f", markersize=8, linewidth=1.5, label="Pareto front",
            zorder=3)
    refs = [r for r in pool if r.reference]
    ax.scatter([r.value(profile, E2EL) for r in refs], [r.value(profile, THROUGHPUT) for r in refs],
               s=110, facecolors="none", edgecolors="#1c7ed6", linewidths=1.6,
               label="reference configs", zorder=4)
    for r in pool:
        ax.annotate(_label(r), (r.value(profile, E2EL), r.value(profile, THROUGHPUT)),
                    textcoords="offset points", xytext=(6, 4), fontsize=8, color="#343a40")
    ax.set_xlabel(f"mean end-to-end latency ({UNITS[E2EL]}, lower is better)")
    ax.set_ylabel(f"output throughput ({UNITS[THROUGHPUT]}, higher is better)")
    infeasible = len([r for r in recs if not r.feasible])
    ax.set_title(f"{profile}: {len(pool)} feasible trials, {len(front)} on the front"
                 + (f", {infeasible} infeasible not shown" if infeasible else ""), fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def importances(study: optuna.Study, recs: list[TrialRecord]) -> dict[str, dict[str, float]]:
    """Optuna's fANOVA importance per objective, over feasible trials only."""
    feasible_numbers = {r.number for r in recs if r.feasible}
    trials = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if t.number in feasible_numbers]
    names = study.metric_names or []
    out: dict[str, dict[str, float]] = {}
    if len(trials) < 3:
        return out
    sub = optuna.create_study(directions=study.directions)
    sub.add_trials(trials)
    for i, name in enumerate(names):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[name] = optuna.importance.get_param_importances(
                    sub, target=lambda t, i=i: t.values[i],
                    evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
        except (RuntimeError, ValueError):
            continue
    return out


def build(study: optuna.Study, out_dir: Path) -> list[Section]:
    recs = records(study)
    if not recs:
        raise ConfigError(f"study {study.study_name!r} has no finished trial yet")
    profiles = profiles_of(study)
    base = baseline_of(study, recs)
    feasible = [r for r in recs if r.feasible]
    s = Section(f"autotune report: {study.study_name}")
    s.paragraphs.append(
        f"Model `{study.user_attrs.get('model', '?')}`, space `{study.user_attrs.get('space', '?')}`, "
        f"profiles {', '.join(profiles)}. {len(recs)} finished trials: {len(feasible)} feasible, "
        f"{len(recs) - len(feasible)} infeasible or failed."
        + (f" Baseline: #{base.number} ({base.reference})." if base else " No baseline reference ran."))
    sections = [s]

    rec_section = Section("Recommendations")
    for use in USES:
        try:
            rec_section.paragraphs.append(f"**{use}**: " + recommend(recs, profiles, use, base).reason)
        except ConfigError as exc:
            rec_section.paragraphs.append(f"**{use}**: {exc}")
    sections.append(rec_section)

    for profile in profiles:
        sec = Section(f"Pareto front: {profile}")
        front = pareto_front(recs, profile)
        rows = []
        for r in front:
            rows.append([_label(r), _fmt(r.value(profile, THROUGHPUT)), _fmt(r.value(profile, E2EL), 0),
                         ", ".join(f"{k}={v}" for k, v in differing_params(r, base).items()) or "(baseline)",
                         {True: "yes", False: "no", None: "-"}[beyond_noise(r, base, profile, THROUGHPUT)]])
        sec.tables.append((["trial", "output tok/s", "mean E2EL ms", "differs from baseline",
                            "throughput difference beyond noise"], rows))
        if feasible:
            name = f"pareto-{profile}.png"
            plot_front(recs, profile, out_dir / name)
            sec.images.append((name, f"Pareto front at {profile}"))
        sections.append(sec)

    imp = importances(study, recs)
    sec = Section("Parameter importance")
    if imp:
        params = sorted({p for v in imp.values() for p in v})
        sec.tables.append((["parameter", *imp], [[p, *[_fmt(v.get(p, 0.0), 2) for v in imp.values()]]
                                                  for p in params]))
        sec.paragraphs.append("fANOVA importance (Optuna) per objective over feasible trials; "
                              "each column sums to 1.")
    else:
        sec.paragraphs.append("Fewer than 3 feasible trials: importance needs more trials.")
    sections.append(sec)

    sec = Section("Effect of each parameter per profile")
    tp_effects, lat_effects = effects(recs, profiles, THROUGHPUT), effects(recs, profiles, E2EL)
    rows = []
    for e_tp, e_lat in zip(tp_effects, lat_effects, strict=True):
        rows.append([e_tp.param, e_tp.profile,
                     "; ".join(f"{k}: {_fmt(v)} tok/s (n={e_tp.counts[k]})" for k, v in e_tp.means.items()),
                     f"{_fmt(e_tp.change_pct)}%", f"{_fmt(e_lat.change_pct)}%",
                     f"{e_tp.matched_pairs} matched pairs" if e_tp.matched_pairs else "group means"])
    sec.tables.append((["parameter", "profile", "mean throughput by value",
                        "throughput change first→last value", "E2EL change first→last value",
                        "from"], rows))
    flips = sign_flips(tp_effects)
    sec.paragraphs.append(
        "Parameters whose throughput effect changes sign between profiles: "
        + (", ".join(flips) if flips else "none") + ".")
    sections.append(sec)

    sec = Section("Every trial against the baseline")
    head = ["trial", "status"] + [f"{p} {m}" for p in profiles for m in ("tok/s Δ%", "E2EL Δ%")]
    rows = []
    for r in recs:
        cells = [_label(r), "ok" if r.feasible else r.failure_class or "failed"]
        for p in profiles:
            if r.feasible and base is not None and base.feasible and p in base.metrics:
                cells += [f"{delta_pct(r.value(p, THROUGHPUT), base.value(p, THROUGHPUT)):+.1f}",
                          f"{delta_pct(r.value(p, E2EL), base.value(p, E2EL)):+.1f}"]
            else:
                cells += ["-", "-"]
        rows.append(cells)
    sec.tables.append((head, rows))
    sections.append(sec)

    sec = Section("Failed and infeasible trials by class")
    groups = failures_by_class(recs)
    sec.tables.append((["class", "trials", "first message"],
                       [[cls, ", ".join(_label(r) for r in rs), rs[0].failure_message[:200]]
                        for cls, rs in groups.items()]))
    if not groups:
        sec.paragraphs.append("None.")
    sections.append(sec)
    return sections


def to_markdown(sections: list[Section]) -> str:
    lines: list[str] = []
    for i, sec in enumerate(sections):
        lines += [("# " if i == 0 else "## ") + sec.title, ""]
        for p in sec.paragraphs:
            lines += [p, ""]
        for head, rows in sec.tables:
            if not rows:
                continue
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "---|" * len(head))
            lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
            lines.append("")
        for name, alt in sec.images:
            lines += [f"![{alt}]({name})", ""]
    return "\n".join(lines)


def to_html(sections: list[Section]) -> str:
    def inline(text: str) -> str:
        text = html.escape(text)
        parts = text.split("**")
        text = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
        parts = text.split("`")
        return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))

    body = []
    for i, sec in enumerate(sections):
        tag = "h1" if i == 0 else "h2"
        body.append(f"<{tag}>{html.escape(sec.title)}</{tag}>")
        body += [f"<p>{inline(p)}</p>" for p in sec.paragraphs]
        for head, rows in sec.tables:
            if not rows:
                continue
            body.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>")
            body += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows]
            body.append("</table>")
        body += [f'<img src="{html.escape(n)}" alt="{html.escape(a)}">' for n, a in sec.images]
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#212529}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ced4da;"
             "padding:4px 8px;font-size:14px}th{background:#f1f3f5}img{max-width:100%}")
    title = html.escape(sections[0].title)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(study: optuna.Study, out_dir: Path) -> list[Path]:
    """Write report.md, report.html and the plots to ``out_dir``; returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = build(study, out_dir)
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(to_markdown(sections))
    page.write_text(to_html(sections))
    return [md, page, *sorted(out_dir.glob("pareto-*.png"))]
