"""`autotune report`: a Markdown and HTML report: the front with intervals, recommendations,
importance and effects with their uncertainty, every trial, failures.

``compute`` reads the study once and computes every finding (a ``Report``); ``render`` turns it
into one document (sections of paragraphs, tables and image names), written twice so that the
Markdown and the HTML cannot disagree; ``draw`` makes the plots it names (matplotlib PNGs, Agg).
"""

from __future__ import annotations

import html
import math
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.core.analysis.effects import Effect, SignFlip, effects, sign_flips
from autotune.core.analysis.recommend import USES, NoFeasibleTrial, recommend
from autotune.core.analysis.study_data import StudyData, describe_params, failures_by_class
from autotune.core.metrics.registry import METRICS, PROMPT_BUCKETS, Source, bucket_key
from autotune.core.trial.capacity_search import CapacitySearch
from autotune.core.trial.capacity_search import boundary_text as capacity_describe
from autotune.core.trial.outcome import TrialOutcome
from autotune.errors import ConfigError
from autotune.study.plans import read_plan
from autotune.study.plots import plot_capacity
from autotune.study.records import read_confirmed, study_data

MIN_TRIALS_FOR_IMPORTANCE = 8
BOOTSTRAP_ROUNDS = 20


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (file name, alt text)


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


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


def capacity_sections(data: StudyData) -> list[Section]:
    """Per capacity profile: every trial's boundary and the front's capacity curves."""
    sections = []
    for profile in dict.fromkeys(p for t in data.outcomes for p in t.capacity):
        searched = [t for t in data.outcomes if profile in t.capacity]
        sec = Section(f"Capacity: {profile}")
        first = searched[0].capacity[profile]
        unit = "concurrent requests" if first.load == "concurrency" else "req/s"
        sec.paragraphs.append(
            f"The highest load ({unit}) at which every SLO held ({', '.join(first.limits)}), "
            "found on one deployment per trial by bracketing and bisecting the load; 'not met at' "
            "is the lowest load above it that missed an SLO, so the boundary lies between them "
            "(the crossing is interpolated on the worst SLO's log margin). Loads near the limit "
            "were measured again. Throughput is what the trial sustained at the load it met.")
        rows = []
        for t in searched:
            b = t.capacity[profile].boundary
            rows.append([t.label, _fmt(b.load, 2) if b.found else "-", _fmt(b.fail_load, 2),
                         _fmt(b.estimate, 2), str(b.probes),
                         data.estimate(t, profile, "output_throughput").text
                         if t.has(profile, "output_throughput") else "-",
                         capacity_describe(t.capacity[profile])])
        sec.tables.append((["trial", "met at", "not met at", "crossing", "probes",
                            "output tok/s there", "result"], rows))
        sec.images.append((f"capacity-{profile}.png",
                           f"capacity curves of {profile}: SLO metrics against load"))
        sections.append(sec)
    return sections


def ttft_by_length_sections(data: StudyData) -> list[Section]:
    """Per profile whose prompts span more than one length bucket: the front's median TTFT in
    each bucket, with its interval (where long prompts wait shows here)."""
    sections = []
    keys = [bucket_key(low, high) for low, high in PROMPT_BUCKETS]
    for profile in data.profiles:
        found = [k for k in keys if any(t.has(profile, k) for t in data.feasible)]
        if len(found) < 2:
            continue
        sec = Section(f"TTFT by prompt length: {profile}")
        sec.paragraphs.append("Median TTFT of the requests whose prompt falls in each bucket "
                              "(tokens), mean over the runs [95% interval], for the front.")
        rows = [[t.label, *[data.estimate(t, profile, k).text if t.has(profile, k) else "-"
                            for k in found]] for t in data.front()]
        sec.tables.append((["trial", *[METRICS[k].label.removeprefix("median TTFT of prompts of ")
                                       for k in found]], rows))
        sections.append(sec)
    return sections


def capacity_curves(data: StudyData, profile: str) -> dict[str, CapacitySearch]:
    """The curves a capacity plot shows: the front's members that searched ``profile`` (else
    the first six that did)."""
    searched = [t for t in data.outcomes if profile in t.capacity]
    front = [t for t in data.front() if profile in t.capacity] or searched[:6]
    return {t.label: t.capacity[profile] for t in front[:6]}


def importances(trials: list[FrozenTrial], directions: list[optuna.study.StudyDirection],
                data: StudyData) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Optuna's fANOVA importance per objective over the feasible ones of ``trials`` (their
    search values), with the 10th-90th percentile over bootstrap resamples of the trials:
    objective -> parameter -> (importance, low, high). Empty below MIN_TRIALS_FOR_IMPORTANCE
    feasible trials."""
    numbers = {t.number for t in data.feasible}
    trials = [t for t in trials if t.number in numbers and t.state == TrialState.COMPLETE]
    if len(trials) < MIN_TRIALS_FOR_IMPORTANCE:
        return {}
    rng = np.random.default_rng(0)
    samples = [trials] + [[trials[i] for i in rng.integers(0, len(trials), len(trials))]
                          for _ in range(BOOTSTRAP_ROUNDS)]
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for i, o in enumerate(data.objectives):
        found: list[dict[str, float]] = []
        for sample in samples:
            sub = optuna.create_study(directions=directions)
            sub.add_trials(sample)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    found.append(optuna.importance.get_param_importances(
                        sub, target=lambda t, i=i: t.values[i],
                        evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)))
            except (RuntimeError, ValueError):
                continue
        if found:
            params = sorted(found[0])
            out[o.name] = {p: (found[0][p], *np.percentile([f.get(p, 0.0) for f in found[1:] or found],
                                                           [10, 90]).tolist()) for p in params}
    return out


def effect_metrics(data: StudyData) -> list[str]:
    """The metrics whose parameter effects the report estimates: the objectives' metrics, the
    interactive and throughput pair (where a sign flip shows), and the server metrics that the
    study's workloads produce (a prefix-cache hit rate where prefixes are shared)."""
    measured = {m for t in data.feasible for r in t.results.values() for run in r.runs for m in run}
    server = [k for k, m in METRICS.items() if m.source is Source.SERVER and k in measured]
    wanted = [o.metric for o in data.objectives] + ["mean_e2el_ms", "output_throughput"] + server
    return [m for m in dict.fromkeys(wanted) if m in measured]


@dataclass(frozen=True)
class Report:
    """Everything the report says, computed from the study read once."""

    study_name: str
    model: str
    space_path: str
    data: StudyData  # every finished trial, confirmed numbers in place of the search's
    confirmed: frozenset[int]
    recommendations: tuple[tuple[str, str], ...]  # (use, reason or why none)
    importance: dict[str, dict[str, tuple[float, float, float]]]
    effects: tuple[Effect, ...]
    flips: tuple[SignFlip, ...]
    unconfirmed_flips: tuple[str, ...]


def compute(study: optuna.Study) -> Report:
    """Read the study once and compute every finding of the report."""
    data = study_data(study)
    if not data.outcomes:
        raise ConfigError(f"study {study.study_name!r} has no finished trial yet")
    stored = read_plan(study)
    recommendations = []
    for use in USES:
        try:
            recommendations.append((use, recommend(data, use).reason))
        except NoFeasibleTrial as exc:
            recommendations.append((use, str(exc)))
    found = [e for metric in effect_metrics(data) for e in effects(data, metric)]
    flips, unconfirmed = sign_flips(found)
    return Report(
        study_name=study.study_name, model=stored.model if stored else "?",
        space_path=stored.space_path if stored else "?", data=data,
        confirmed=frozenset(read_confirmed(study)), recommendations=tuple(recommendations),
        importance=importances(study.get_trials(deepcopy=False), study.directions, data),
        effects=tuple(found), flips=tuple(flips), unconfirmed_flips=tuple(unconfirmed))


def render(report: Report) -> list[Section]:
    """The report's sections, from what ``compute`` found; no plot is drawn here."""
    data = report.data
    feasible = data.feasible
    base = data.baseline
    s = Section(f"autotune report: {report.study_name}")
    s.paragraphs.append(
        f"Model `{report.model}`, space `{report.space_path}`, profiles "
        f"{', '.join(data.profiles)}. Objectives: "
        + "; ".join(f"{o.label}, {o.direction}" for o in data.objectives) + ". "
        + f"{len(data.outcomes)} finished trials, {len(feasible)} feasible."
        + (f" {len(report.confirmed)} of them were confirmed by redeployment: their numbers are "
           "the confirmed ones." if report.confirmed else "")
        + (f" Baseline: {base.label}." if base else " No baseline reference ran."))
    s.paragraphs.append("Intervals are 95%. Noise per objective: " + "; ".join(
        f"{o.name}: {data.noise.of(o.name).log_sd:.1%} ({data.noise.of(o.name).source})"
        for o in data.objectives) + ". A difference whose interval contains zero is a tie.")
    sections = [s]

    rec = Section("Recommendations")
    rec.paragraphs += [f"**{use}**: {reason}" for use, reason in report.recommendations]
    sections.append(rec)

    sec = Section("The front")
    rows = []
    for t in data.front():
        cells = [t.label + (" (confirmed)" if t.number in report.confirmed else "")]
        for o in data.objectives:
            cells.append(data.objective_estimate(t, o).text)
            if base is not None:
                change = data.versus_baseline(t, o.profile, o.metric)
                cells.append(change.text if change else "-")
        cells.append(describe_params(data.differences(t)) or f"({data.reference_point})")
        rows.append(cells)
    per_objective = (lambda o: (o.label, "vs baseline")) if base is not None else (lambda o: (o.label,))
    head = ["trial"] + [h for o in data.objectives for h in per_objective(o)] + \
        [f"differs from {data.reference_point}"]
    sec.tables.append((head, rows))
    if feasible and len(data.objectives) > 1:
        sec.images.append(("front.png", "the front: " + " against ".join(o.label for o in data.objectives)))
    sections.append(sec)

    sections += capacity_sections(data) + ttft_by_length_sections(data)

    imp = report.importance
    sec = Section("Parameter importance")
    if imp:
        params = sorted({p for v in imp.values() for p in v})
        sec.tables.append((["parameter", *imp], [
            [p, *[f"{v[p][0]:.2f} [{v[p][1]:.2f}, {v[p][2]:.2f}]" if p in v else "-"
                  for v in imp.values()]] for p in params]))
        sec.paragraphs.append("fANOVA importance (Optuna) per objective over feasible trials (the "
                              f"search's numbers), with the 10th-90th percentile over {BOOTSTRAP_ROUNDS} "
                              "bootstrap resamples of the trials; a wide range means the trials "
                              "cannot rank the parameter.")
    else:
        sec.paragraphs.append(f"Withheld: {len(feasible)} feasible trials; importance needs at "
                              f"least {MIN_TRIALS_FOR_IMPORTANCE} to mean anything. The effects "
                              "below say what the trials do support.")
    sections.append(sec)

    sec = Section("Effect of each parameter per profile")
    estimated = [e for e in report.effects if e.change is not None]
    sec.tables.append((["parameter", "change", "profile", "metric", "effect [95% interval]", "from"],
                       [[e.param, f"{e.base} → {e.value}", e.profile, e.metric, e.verdict, e.method]
                        for e in sorted(estimated, key=lambda e: (e.param, e.value, e.metric, e.profile))]))
    withheld: dict[str, list[str]] = {}
    for e in report.effects:
        if e.change is None:
            withheld.setdefault(e.withheld, []).append(f"{e.param}={e.value}")
    for why, changes in withheld.items():
        sec.paragraphs.append(f"Withheld ({why}): {', '.join(dict.fromkeys(changes))}.")
    sec.paragraphs.append(
        "Effects that change sign between profiles (both intervals exclude zero): "
        + ("; ".join(f"{f.param}={f.value} on {f.metric}: " + ", ".join(
            f"{p} {c.text}" for p, c in f.by_profile.items()) for f in report.flips) or "none") + ".")
    if report.unconfirmed_flips:
        sec.paragraphs.append("Point estimates of opposite sign that the noise does not separate "
                              f"from zero (not a finding): {', '.join(report.unconfirmed_flips)}.")
    sections.append(sec)

    sec = Section("Every trial")
    head = ["trial", "status", "start-up", *[o.name for o in data.objectives],
            f"differs from {data.reference_point}"]
    rows = []
    for t in data.outcomes:
        cells = [t.label + (" (confirmed)" if t.number in report.confirmed else ""), t.status,
                 t.startup_text]
        cells += [data.objective_estimate(t, o).text if t.feasible and t.has(o.profile, o.metric)
                  else "-" for o in data.objectives]
        cells.append(describe_params(data.differences(t)) or f"({data.reference_point})")
        rows.append(cells)
    sec.tables.append((head, rows))
    served = [t for t in data.outcomes if t.startup_phases]
    if served:
        sec.paragraphs.append(
            "Start-up: ready seconds, of them torch.compile's (and whether its cache served the "
            "graphs), as vLLM logs them; every phase is in each trial's `startup_phases`. Median "
            f"ready {statistics.median(t.startup_s or 0 for t in served):.0f} s over "
            f"{len(served)} deployments.")
    sections.append(sec)

    sec = Section("Failed and infeasible trials by class")
    groups = failures_by_class(data.outcomes)
    sec.tables.append((["class", "trials", "first message"],
                       [[cls, ", ".join(t.label for t in ts), ts[0].failure_message[:200]]
                        for cls, ts in groups.items()]))
    if not groups:
        sec.paragraphs.append("None.")
    sections.append(sec)
    return sections


def draw(report: Report, out_dir: Path) -> None:
    """The plots the sections name."""
    data = report.data
    if data.feasible and len(data.objectives) > 1:
        plot_front(data, out_dir / "front.png")
    for profile in dict.fromkeys(p for t in data.outcomes for p in t.capacity):
        plot_capacity(capacity_curves(data, profile), out_dir / f"capacity-{profile}.png")


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
    report = compute(study)
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = render(report)
    draw(report, out_dir)
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(to_markdown(sections))
    page.write_text(to_html(sections))
    return [md, page, *sorted(out_dir.glob("*.png"))]
