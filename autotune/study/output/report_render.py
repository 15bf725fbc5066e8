"""`autotune report`'s text: the sections of one document (paragraphs, tables, the names of
its figures) from a computed ``Report``, written as Markdown and as HTML so that the two cannot
disagree. Computes no finding and draws nothing."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from autotune.core.analysis.recommendation import counted, legend, searched
from autotune.core.analysis.study_data import StudyData, failures_by_class, format_params
from autotune.core.metrics.registry import METRICS, THROUGHPUT_METRIC
from autotune.core.trial.capacity_search import boundary_text
from autotune.core.trial.outcome import startup_summary
from autotune.study.output.documents import front_records, trial_record
from autotune.study.output.plot_data import load_png
from autotune.study.output.report_data import BOOTSTRAP_ROUNDS, MIN_TRIALS_FOR_IMPORTANCE, Report

FRONT_PNG = "front.png"


def capacity_png(profile: str) -> str:
    """The file name of a capacity profile's figure."""
    return f"capacity-{profile}.png"


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[str]]]] = field(default_factory=list)
    images: list[tuple[str, str]] = field(default_factory=list)  # (file name, alt text)
    blocks: list[str] = field(default_factory=list)  # preformatted text, before the paragraphs


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


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
                         data.estimate(t, profile, THROUGHPUT_METRIC).text
                         if t.has(profile, THROUGHPUT_METRIC) else "-",
                         boundary_text(t.capacity[profile])])
        sec.tables.append((["trial", "met at", "not met at", "crossing", "probes",
                            f"{METRICS[THROUGHPUT_METRIC].label} there", "result"], rows))
        sec.images.append((capacity_png(profile),
                           f"capacity curves of {profile}: SLO metrics against load"))
        sections.append(sec)
    return sections


def ttft_by_length_sections(report: Report) -> list[Section]:
    """Per profile whose prompts span more than one length bucket: the front's median TTFT in
    each bucket, with its interval."""
    data, sections = report.data, []
    for profile, found in report.ttft_buckets.items():
        sec = Section(f"TTFT by prompt length: {profile}")
        sec.paragraphs.append("Median TTFT of the requests whose prompt falls in each bucket "
                              "(tokens), mean over the runs [95% interval], for the front.")
        rows = [[t.label, *[data.estimate(t, profile, k).text if t.has(profile, k) else "-"
                            for k in found]] for t in data.front()]
        sec.tables.append((["trial", *[METRICS[k].label.removeprefix("median TTFT of prompts of ")
                                       for k in found]], rows))
        sections.append(sec)
    return sections


def report_sections(report: Report) -> list[Section]:
    """The report's sections, from what ``compute_report`` found."""
    data = report.data
    feasible = data.feasible
    base = data.baseline
    s = Section(f"autotune report: {report.study_name}")
    found = searched(data)
    s.paragraphs.append(
        f"Model `{report.model}`, space `{report.space_path}`, profiles "
        f"{', '.join(data.profiles)}. Objectives: "
        + "; ".join(f"{o.label}, {o.direction}" for o in data.objectives) + ". "
        + f"{counted(len(data.outcomes), 'finished trial')}, {len(feasible):,} feasible: "
        + f"{found.text}."
        + (f" {counted(len(report.confirmed), 'trial')} of them "
           f"{'was' if len(report.confirmed) == 1 else 'were'} confirmed by redeployment: their "
           "numbers are the means over their search's and confirmation's deployments."
           if report.confirmed else "")
        + (f" Baseline: {base.label}." if base else " No baseline reference ran."))
    s.paragraphs.append("Intervals are 95%. Noise per objective: " + "; ".join(
        f"{o.name}: {data.noise.of(o.name).log_sd:.1%} ({data.noise.of(o.name).source})"
        for o in data.objectives) + ". A difference is the row's change against the baseline "
        "(or the pick's against a rival), in the metric's own direction; "
        + legend(data.smallest_difference) + ".")
    sections = [s]

    rec = Section("Recommendations")
    if report.table:
        rec.blocks.append("\n".join(report.table))
        rec.paragraphs.append("Each recommendation in full (as `autotune recommend --explain` "
                              "says it):")
    rec.paragraphs += [f"**{use}**: {reason}" for use, reason in report.recommendations]
    sections.append(rec)

    sec = Section("The front")
    rows = []
    for r in front_records(data):  # the records `pareto --format json` prints
        cells = [f"#{r.number}" + (f" {r.reference}" if r.reference else "")
                 + (" (confirmed)" if r.confirmed else "")]
        for o in data.objectives:
            cells.append(r.objectives[o.name].text)
            if base is not None:
                versus = r.vs_baseline[o.name]
                cells.append(versus.text if versus else "-")
        cells.append(format_params(r.changes) or f"({data.reference_point})")
        rows.append(cells)
    per_objective = (lambda o: (o.label, "vs baseline")) if base is not None else (lambda o: (o.label,))
    head = ["trial"] + [h for o in data.objectives for h in per_objective(o)] + \
        [f"differs from {data.reference_point}"]
    sec.tables.append((head, rows))
    if report.has_front_plane:
        sec.images.append((FRONT_PNG, "the front: " + " against ".join(o.label for o in data.objectives)
                           + "; the recommended picks starred"))
    sections.append(sec)
    if report.load_curves:
        sec = Section("Each pick under load")
        sec.paragraphs.append(
            "Latency against concurrency for each recommended trial, from every run the study "
            "made of it: each fixed profile's mean with its 95% interval at the profile's "
            "concurrency, and each capacity probe (one run) at the load it probed.")
        sec.images += [(load_png(c), c.title) for c in report.load_curves]
        sections.append(sec)

    sections += capacity_sections(data) + ttft_by_length_sections(report)

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
        sec.paragraphs.append(f"Withheld: {counted(len(feasible), 'feasible trial')}; importance needs at "
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
    counted_runs = any(r.stops for t in data.outcomes for r in t.results.values())
    head = ["trial", "status", "start-up", *[o.name for o in data.objectives],
            *(["requests"] if counted_runs else []), f"differs from {data.reference_point}"]
    rows = []
    for t in data.outcomes:  # the records `trials --format json` prints
        r = trial_record(data, t)
        cells = [t.label + (" (confirmed)" if r.confirmed else ""), r.outcome, t.startup_text]
        for o in data.objectives:
            interval = r.metric(o.profile, o.metric)
            reached = f" ({t.reached(o.profile)})" if t.reached(o.profile) else ""
            cells.append(interval.text + reached if r.feasible and interval is not None else "-")
        cells += [t.requests_cell] if counted_runs else []
        cells.append(format_params(r.changes) or f"({data.reference_point})")
        rows.append(cells)
    sec.tables.append((head, rows))
    if any(t.startup_phases for t in data.outcomes):
        sec.paragraphs.append(
            "Start-up: ready seconds and the phases that took most of them, each between named "
            "lines of vLLM's log (docs/startup.md), compile with whether vLLM's compile cache "
            "served it; every phase is in each trial's `startup_phases`. Each phase's median, "
            f"{startup_summary(data.outcomes)}.")
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


def to_markdown(sections: list[Section]) -> str:
    lines: list[str] = []
    for i, sec in enumerate(sections):
        lines += [("# " if i == 0 else "## ") + sec.title, ""]
        for block in sec.blocks:
            lines += ["```", block, "```", ""]
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
        body += [f"<pre>{html.escape(b)}</pre>" for b in sec.blocks]
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
