"""The terminal's tables of the reading and deploying commands, as rich ``Table`` records
built from the same records that `--format json|csv` renders (``documents``):
``study.output.terminal`` fits them to the terminal, the CLI prints them. Names are broken
into lines of a given width at most (``breakable``); intervals never are."""

from __future__ import annotations

import re
from collections.abc import Mapping

from rich.markup import escape
from rich.table import Table

from autotune.core.analysis.study_data import StudyData, format_params
from autotune.core.maths.numbers import number_text
from autotune.core.metrics.registry import RUN_METRICS, SUMMARY_METRICS, label_of
from autotune.core.space.search_space import SearchSpace
from autotune.core.trial.capacity_search import CapacitySearch
from autotune.core.trial.outcome import Measurement, TrialOutcome


def capacity_cell(search: CapacitySearch) -> str:
    """For a table: '48 of 57' (met at 48, not at 57), '64+' (met at the top of the range),
    'below #3', or 'none'."""
    b = search.boundary
    if b.below_incumbent is not None:
        return f"below #{b.below_incumbent}"
    if not b.found:
        return "none"
    return f"{b.load:g}+" if b.fail_load is None else f"{b.load:g} of {b.fail_load:g}"


def breakable(text: str, width: int | None) -> str:
    """``text`` in lines of at most ``width`` characters, broken only at a space or after a
    ``-`` or ``_`` (a piece longer than ``width`` stays whole, never cut); whole for None."""
    if width is None:
        return text
    lines = []
    for line in text.split("\n"):
        current = ""
        for word in line.split(" "):
            for i, piece in enumerate(re.findall(r"[^-_]*[-_]+|[^-_]+", word) or [""]):
                glue = " " if i == 0 and current else ""
                if current and len(current) + len(glue) + len(piece) > width:
                    lines.append(current)
                    current = piece
                else:
                    current += glue + piece
        lines.append(current)
    return "\n".join(lines)


def metric_header(profile: str, metric: str, width: int | None) -> str:
    """A column of one profile's metric: the profile over the metric's label (the registry's:
    'output throughput' for output_throughput), each broken as ``breakable`` does."""
    return f"{breakable(profile, width)}\n{breakable(label_of(metric), width)}"


def front_table(data: StudyData, title: str, *, changes_column: bool = True,
                width: int | None = None) -> Table:
    """The front as `pareto --format json` has it (``FrontRecord``): each objective's interval
    and, under it with a baseline, the change against it with its verdict; intervals never
    broken across lines, names broken into lines of ``width`` at most (``breakable``)."""
    from autotune.study.output.documents import front_records

    records = front_records(data)
    table = Table(title=f"the front ({title}): " + " against ".join(
        o.label for o in data.objectives) + "; mean [95% interval]")
    table.add_column("trial", overflow="fold")
    versus = "\nvs baseline" if data.baseline is not None else ""
    for o in data.objectives:
        table.add_column(metric_header(o.profile, o.metric, width) + versus, justify="right",
                         no_wrap=True)
    capacity = list(dict.fromkeys(p for r in records for p in r.capacity))
    for p in capacity:
        table.add_column(f"{breakable(p, width)}\nload met of missed", justify="right",
                         overflow="fold")
    if changes_column:
        table.add_column(f"differs from {data.reference_point}")
    by_number = {t.number: t for t in data.front()}
    for r in records:
        t = by_number[r.number]
        cells = [breakable(t.label + (" (confirmed)" if r.confirmed else ""), width)]
        for o in data.objectives:
            reached = t.reached(o.profile)
            change = r.vs_baseline[o.name]
            cells.append(r.objectives[o.name].text + (f"\n({reached})" if reached else "")
                         + ("" if change is None else f"\n{change.change_text}\n{change.verdict}"))
        cells += [capacity_cell(r.capacity[p]) if p in r.capacity else "-" for p in capacity]
        if changes_column:
            cells.append(format_params(r.changes) or f"({data.reference_point})")
        table.add_row(*cells)
    return table


def trials_table(data: StudyData, *, changes_column: bool = True,
                 width: int | None = None) -> Table:
    """One row per finished trial as `trials --format json` has it (``TrialRecord``): each
    objective's mean [95% interval] (confirmation deployments included, marked), and what
    differs from the baseline (or from vLLM's defaults without one); intervals never broken
    across lines, names broken into lines of ``width`` at most (``breakable``)."""
    from autotune.study.output.documents import trial_record

    trials = data.outcomes
    table = Table(title="trials; mean [95% interval]")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("result", overflow="fold")
    table.add_column("start-up")
    for o in data.objectives:
        table.add_column(metric_header(o.profile, o.metric, width), justify="right", no_wrap=True)
    capacity = list(dict.fromkeys(p for t in trials for p in t.capacity))
    for p in capacity:
        table.add_column(f"{breakable(p, width)}\nload met of missed", justify="right",
                         overflow="fold")
    counted = any(r.stops for t in trials for r in t.results.values())
    if counted:  # older studies recorded no request counts
        table.add_column("requests", overflow="fold")
    if changes_column:
        table.add_column(f"differs from {data.reference_point}")
    retried_as = {t.retry_of: t.number for t in trials if t.retry_of is not None}
    for t in trials:
        if t.skipped:
            continue  # a duplicate or over-budget claim, given back before deploying
        r = trial_record(data, t)
        result = (f"worker lost, retried as #{retried_as[t.number]}"
                  if t.number in retried_as and t.status == t.state else r.outcome)
        result += ", confirmed" if r.confirmed else ""
        values = []
        for o in data.objectives:
            interval = r.metric(o.profile, o.metric)
            reached = t.reached(o.profile)
            values.append(interval.text + (f"\n{reached}" if reached else "")
                          if r.feasible and interval is not None else "-")
        values += [capacity_cell(r.capacity[p]) if p in r.capacity else "-" for p in capacity]
        values += [t.requests_cell] if counted else []
        changes = [format_params(r.changes) or "-"] if changes_column else []
        table.add_row(breakable(t.label.removeprefix("#"), width), breakable(result, width),
                      t.startup_text, *values, *changes)
    return table


STUDY_COLUMNS = ("trials", "served", "rejected", "failed", "front", "created")


def studies_table(rows: list, *, boxed: bool, date_only: bool) -> Table:
    """The studies, names whole (never wrapped); ``date_only`` drops the creation time."""
    from rich import box

    table = Table(box=box.HEAVY_HEAD if boxed else None, pad_edge=boxed)
    table.add_column("study", no_wrap=True)
    for col in STUDY_COLUMNS:
        table.add_column(col, justify="left" if col == "created" else "right", no_wrap=True)
    for r in rows:
        created = r.created[:10] if date_only else r.created
        table.add_row(r.study, *(f"{v:,}" for v in (r.trials, r.served, r.rejected, r.failed)),
                      "-" if r.front is None else f"{r.front:,}", created or "-")
    return table


def summary_table(title: str, rows: dict[str, dict], width: int | None = None) -> Table:
    """vllm bench serve's keys per profile; names broken into lines of ``width`` at most."""
    table = Table(title=title)
    table.add_column("metric", overflow="fold")
    for name in rows:
        table.add_column(breakable(name, width), justify="right", overflow="fold")
    keys = ["completed", "failed", "duration", *RUN_METRICS, "max_concurrent_requests",
            "delivery_bursts"]
    for key in keys:
        if any(key in r for r in rows.values()):
            table.add_row(breakable(key, width), *[number_text(float(r[key])) if isinstance(r.get(key), int | float)
                                 else "-" for r in rows.values()])
    return table


def space_table(space: SearchSpace, skip: Mapping[str, str], width: int | None) -> Table:
    """A space's parameters: domain, default, vLLM's flag, and why one does not apply; names
    and flags broken into lines of ``width`` at most (``breakable``), brackets as typed (a
    domain of [false, true] is no markup)."""
    table = Table(title=f"{space.name}: {space.path}")
    for col in ("parameter", "domain", "default", "vLLM", "applies"):
        table.add_column(col, overflow="fold")
    for p in space.parameters:
        domain = (str(list(p.choices)) if p.type == "categorical" else
                  "[false, true]" if p.type == "bool" else
                  f"{p.type} {p.low:g}..{p.high:g}{' log' if p.log else ''}")
        where = p.flag or f"{p.json.flag} JSON" if p.json else p.flag
        cells = (p.name, domain, str(p.default), where or "")
        table.add_row(*(escape(breakable(c, width)) for c in cells), escape(skip.get(p.name, "yes")))
    return table


def relaunch_table(trial: TrialOutcome, measured: Measurement) -> Table:
    """`export --verify`: each profile's summary metrics as stored and as relaunched."""
    table = Table(title=f"trial #{trial.number}: stored vs relaunched")
    for col in ("profile", "metric", "stored", "relaunched", "difference"):
        table.add_column(col, justify="right")
    for name, result in measured.results.items():
        for metric in SUMMARY_METRICS:
            a, b = trial.value(name, metric), result.mean(metric)
            # A TPOT of 0 is possible: every stream of that run arrived in one burst.
            table.add_row(name, metric, number_text(a), number_text(b),
                          f"{(b - a) / a * 100:+.1f}%" if a else "-")
    return table
