"""What the terminal shows of a study: tables fitted without breaking a word (which width of
names, which columns and which split make a table fit), and the lines around them. Measures
with the console it is given and returns tables and ``Line``s; the CLI prints them (it is the
one that prints)."""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from autotune.core.analysis.recommendation import (
    TieSettings,
    counted,
    default_uses,
    legend,
    recommend_each,
)
from autotune.core.analysis.recommendation import table as recommendation_table
from autotune.core.analysis.study_data import StudyData, format_params, noise_line
from autotune.study.output.tables import front_table, studies_table, trials_table


@dataclass(frozen=True)
class Line:
    """A line of text, never markup. ``wrap``: the terminal wraps it between words (a list of
    changes); else it is printed as it is (already wrapped, or a line to copy whole)."""

    text: str
    wrap: bool = False


Shown = Table | Line

# The longest line a name may keep in a table cell, tried in turn until the table fits the
# terminal (None: names whole).
NAME_WIDTHS: tuple[int | None, ...] = (None, 16, 12, 8)


def _lows_highs(table: Table, console: Console) -> tuple[list[int], list[int], int]:
    """Per column, the narrowest it may be (its longest word; a ``no_wrap`` column's longest
    line: an interval is never broken) and the widest it would take; and the table's width
    beyond its columns (borders and padding)."""
    wide = console.options.update_width(10_000)
    ranges = [[Measurement.get(console, wide, cell) for cell in (c.header, *c.cells)]
              for c in table.columns]
    rich_low = [max(m.minimum for m in r) for r in ranges]
    high = [max(m.maximum for m in r) for r in ranges]
    low = [h if c.no_wrap else lo for c, lo, h in zip(table.columns, rich_low, high, strict=True)]
    return low, high, Measurement.get(console, wide, table).minimum - sum(rich_low)


def fits(table: Table, console: Console) -> bool:
    """Whether every word of ``table`` fits the console whole (rich then breaks none), and
    every line of a ``no_wrap`` column."""
    low, _, overhead = _lows_highs(table, console)
    return overhead + sum(low) <= console.width


def _settled(table: Table, console: Console) -> Table:
    """``table`` with widths that keep each column's longest word (a ``no_wrap`` column's
    longest line) whole where the console is narrower than the table: rich's own narrowing
    can cut a column below its longest word even where the words fit (it shrinks the widest
    columns first), so each column gets its longest word and a share of the room left in
    proportion to what it would take beyond that."""
    low, high, overhead = _lows_highs(table, console)
    room = console.width - overhead
    if sum(high) <= room or sum(low) > room:
        return table
    spare = room - sum(low)
    want = [h - lo for h, lo in zip(high, low, strict=True)]
    for column, lo, w in zip(table.columns, low, want, strict=True):
        column.width = lo + spare * w // max(sum(want), 1)
    return table


def fitted(build: Callable[[int | None], Table], console: Console) -> Table | None:
    """``build(width)`` for the first of ``NAME_WIDTHS`` whose table fits; None if none does."""
    return next((t for t in map(build, NAME_WIDTHS) if fits(t, console)), None)


def _columns(table: Table, indexes: Sequence[int], title: str | None) -> Table:
    part = Table(title=title)
    for i in indexes:
        c = table.columns[i]
        part.add_column(c.header, justify=c.justify, overflow=c.overflow, no_wrap=c.no_wrap)
    for row in zip(*(list(table.columns[i].cells) for i in indexes), strict=True):
        part.add_row(*row)
    return part


def split_to_fit(table: Table, console: Console, keep: int = 1) -> list[Table]:
    """``table`` as consecutive tables of as many of its columns as fit the console, each
    beginning with its first ``keep`` columns (the row's name): too many columns for one."""
    parts: list[list[int]] = []
    for i in range(keep, len(table.columns)):
        if parts and fits(_columns(table, [*range(keep), *parts[-1], i], None), console):
            parts[-1].append(i)
        else:
            parts.append([i])
    title = table.title if isinstance(table.title, str) else None
    return [_columns(table, [*range(keep), *part], title if n == 0 else "(continued)")
            for n, part in enumerate(parts)] or [table]


def fitted_tables(build: Callable[[int | None], Table], console: Console,
                  keep: int = 1) -> list[Table]:
    """The table ``build(width)`` makes with names as whole as the console allows
    (``fitted``); where no width fits, its columns in several tables (``split_to_fit``)."""
    table = fitted(build, console)
    parts = [table] if table is not None else split_to_fit(build(NAME_WIDTHS[-1]), console, keep)
    return [_settled(part, console) for part in parts]


def fitted_with_changes(build: Callable[[bool, int | None], Table],
                        changes: Sequence[tuple[str, str]], heading: str,
                        console: Console) -> list[Shown]:
    """A table whose last column lists parameter changes: with that column where every word
    then fits; else without it (``fitted_tables``), and the changes as lines below, one trial
    a line, so that no cell ever breaks a name."""
    table = fitted(lambda width: build(True, width), console)
    if table is not None:
        return [_settled(table, console)]
    return [*fitted_tables(lambda width: build(False, width), console),
            *(Line(text, wrap=True) for text in
              [f"{heading}:", *(f"  {label}: {text}" for label, text in changes)])]


def wrapped(text: str, console: Console) -> list[Line]:
    """``text`` wrapped at the console's width between words (never inside one)."""
    return [Line(line) for line in textwrap.wrap(text, console.width, subsequent_indent="  ",
                                                 break_on_hyphens=False, break_long_words=False)]


def front_view(data: StudyData, title: str, console: Console, *, noise: bool = True) -> list[Shown]:
    """The front table and its legend (the smallest difference in force), with the noise its
    intervals rest on (``noise``: left to the recommendations' table where it follows)."""
    shown = fitted_with_changes(
        lambda column, width: front_table(data, title, changes_column=column, width=width),
        [(t.label, format_params(data.differences(t)) or f"({data.reference_point})")
         for t in data.front()], f"what each front member changes from {data.reference_point}",
        console)
    if not data.front():
        return [*shown, Line("no feasible trial yet")]
    if data.baseline is not None:
        shown += wrapped("vs baseline: the row's change against the baseline; "
                         + legend(data.smallest_difference), console)
    return shown + (wrapped(noise_line(data), console) if noise else [])


def trials_view(data: StudyData, console: Console) -> list[Shown]:
    """The trial table (``trials_table``), fitted to the console."""
    shown = [t for t in data.outcomes if not t.skipped]
    return fitted_with_changes(
        lambda column, width: trials_table(data, changes_column=column, width=width),
        [(t.label, format_params(data.differences(t)) or "-") for t in shown],
        f"what each trial changes from {data.reference_point}", console)


def recommendations_view(data: StudyData, study: str, tie: TieSettings | None,
                         uses: tuple[str, ...], console: Console, *,
                         explain: bool = False) -> list[Shown]:
    """One compact table (a row per use, 80 columns, export commands under it); with
    ``explain``, every use's full text instead, wrapped at the console's width."""
    recs = recommend_each(data, uses, tie)
    if explain:
        return [line for r in recs for line in
                wrapped(r if isinstance(r, str) else f"{r.use}: {r.reason}", console)]
    return [Line(line) for line in recommendation_table(data, recs, study)]


def closing_view(data: StudyData, title: str, tie: TieSettings | None,
                 console: Console) -> list[Shown]:
    """What a study's run ends with: the front, and where anything is feasible, the
    recommendations (whose table ends with the noise) and how to read them in full."""
    shown = front_view(data, title, console, noise=False)
    if not data.front():
        return shown
    study = tie.study if tie else title
    return [*shown, *recommendations_view(data, study, tie, default_uses(data), console),
            Line(f"why, in full: autotune recommend --explain --study {shlex.quote(study)}")]


def studies_view(rows: list, console: Console) -> list[Shown]:
    """The studies in the first layout that fits with every name whole: boxed, then with
    dates only, then without borders; else lines, one study per paragraph."""
    for boxed, date_only in ((True, False), (True, True), (False, True)):
        table = studies_table(rows, boxed=boxed, date_only=date_only)
        if fits(table, console):
            return [table]
    return [Line(line) for r in rows for line in (
        r.study, f"  {counted(r.trials, 'trial')}: {r.served:,} served, {r.rejected:,} rejected, "
                 f"{r.failed:,} failed; front {'-' if r.front is None else r.front}; "
                 f"created {r.created or '-'}")]
