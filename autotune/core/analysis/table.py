"""A recorded table: every configuration of a space deployed once, with repeats per profile.
Pure; no study reads it: the replay (``study.dev.replay``), the benchmarks and the tests do. It
stays in the package because the replay does, and ``benchmarks/data/`` holds tables in its
format. Its columns and header lines: docs/samplers.md#the-recorded-table."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.core.metrics.registry import TABLE_METRICS
from autotune.core.space.search_space import Value, params_key
from autotune.core.trial.outcome import TrialOutcome
from autotune.errors import ConfigError

SERVED = "served"
NOT_REACHED = "not_reached"


@dataclass(frozen=True)
class TableRow:
    """One configuration: what happened to it, and its runs per profile when it served."""

    params: Mapping[str, Value]
    status: str  # SERVED, a FailureClass value, or NOT_REACHED
    runs: Mapping[str, tuple[Mapping[str, float], ...]]  # profile -> per-run metrics
    startup_s: float | None = None
    message: str = ""

    @property
    def served(self) -> bool:
        return self.status == SERVED

    def mean(self, profile: str, metric: str) -> float:
        return statistics.fmean(float(r[metric]) for r in self.runs[profile])


@dataclass(frozen=True)
class RecordedTable:
    """Every configuration of a space with its fate, and how it was recorded."""

    parameters: tuple[str, ...]
    profiles: tuple[str, ...]
    rows: tuple[TableRow, ...]
    header: Mapping[str, str]  # protocol, machine, vLLM version, study

    def find(self, params: Mapping[str, Value]) -> TableRow | None:
        return self._index.get(params_key({k: params.get(k) for k in self.parameters}))

    @functools.cached_property
    def _index(self) -> dict[str, TableRow]:
        return {params_key({k: r.params.get(k) for k in self.parameters}): r for r in self.rows}

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.rows)


def table_from_outcomes(outcomes: Sequence[TrialOutcome], parameters: Sequence[str],
                        profiles: Sequence[str], header: Mapping[str, str],
                        grid: Sequence[Mapping[str, Value]] = ()) -> RecordedTable:
    """One row per configuration from a study's trials (the first complete trial of each);
    configurations of ``grid`` that no trial reached are kept as NOT_REACHED."""
    rows: dict[str, TableRow] = {}
    for t in outcomes:
        if t.state != "complete" or not t.params:
            continue
        key = params_key({k: t.params.get(k) for k in parameters})
        if key in rows:
            continue
        status = SERVED if t.served else t.failure.name
        runs = {p: tuple({m: float(run[m]) for m in TABLE_METRICS if m in run}
                         for run in t.results[p].runs)
                for p in profiles if t.served and p in t.results}
        rows[key] = TableRow(dict(t.params), status, runs, t.startup_s,
                             t.failure_message.splitlines()[0][:200] if t.failure_message else "")
    for params in grid:
        key = params_key({k: params.get(k) for k in parameters})
        rows.setdefault(key, TableRow(dict(params), NOT_REACHED, {}))
    return RecordedTable(tuple(parameters), tuple(profiles), tuple(rows.values()), dict(header))


def _columns(table: RecordedTable) -> list[str]:
    return ([*table.parameters, "status", "repeat", "startup_s"]
            + [f"{p}:{m}" for p in table.profiles for m in TABLE_METRICS] + ["message"])


def to_csv(table: RecordedTable) -> str:
    out = io.StringIO()
    for key, value in table.header.items():
        out.write(f"# {key}: {value}\n")
    writer = csv.DictWriter(out, _columns(table), lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        base = {**{k: _text(row.params.get(k)) for k in table.parameters}, "status": row.status,
                "startup_s": "" if row.startup_s is None else f"{row.startup_s:.1f}",
                "message": row.message}
        repeats = max((len(r) for r in row.runs.values()), default=0)
        for i in range(max(repeats, 1)):
            line = dict(base, repeat=str(i) if repeats else "")
            for p, runs in row.runs.items():
                if i < len(runs):
                    line.update({f"{p}:{m}": f"{v:.6g}" for m, v in runs[i].items()})
            writer.writerow(line)
    return out.getvalue()


def parse_csv(text: str, where: str) -> RecordedTable:
    """The inverse of ``to_csv``; a ConfigError naming ``where`` when it is not such a table."""
    lines = text.splitlines()
    header = {}
    while lines and lines[0].startswith("#"):
        key, _, value = lines.pop(0)[1:].partition(":")
        header[key.strip()] = value.strip()
    reader = csv.DictReader(lines)
    fields = reader.fieldnames or []
    if "status" not in fields or "repeat" not in fields:
        raise ConfigError(f"{where}: not a recorded table (no status and repeat columns); "
                          "write one with benchmarks/record_table.py export")
    parameters = tuple(fields[:fields.index("status")])
    profiles = tuple(dict.fromkeys(f.rsplit(":", 1)[0] for f in fields if ":" in f))
    grouped: dict[str, dict] = {}
    for line in reader:
        params = {k: _value(line[k]) for k in parameters}
        entry = grouped.setdefault(params_key(params), {
            "params": params, "status": line["status"], "runs": {p: [] for p in profiles},
            "startup_s": float(line["startup_s"]) if line["startup_s"] else None,
            "message": line.get("message", "")})
        if line["status"] == SERVED:
            for p in profiles:
                run = {m: float(line[f"{p}:{m}"]) for m in TABLE_METRICS if line.get(f"{p}:{m}")}
                if run:
                    entry["runs"][p].append(run)
    rows = tuple(TableRow(e["params"], e["status"],
                          {p: tuple(r) for p, r in e["runs"].items() if r} if e["status"] == SERVED
                          else {}, e["startup_s"], e["message"]) for e in grouped.values())
    for row in rows:
        if row.served and set(row.runs) != set(profiles):
            raise ConfigError(f"{where}: configuration {dict(row.params)} is served but lacks "
                              f"runs of {sorted(set(profiles) - set(row.runs))}")
    return RecordedTable(parameters, profiles, rows, header)


def _text(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _value(text: str) -> Value:
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        return number if not (isinstance(number, float) and math.isnan(number)) else text
    return text


def fill_unreached(table: RecordedTable, where: Mapping[str, Value]) -> tuple[RecordedTable, str]:
    """Configurations matching ``where`` that the recording did not reach take the failure
    class that the measured ones had most often, when every measured one failed; the rows say
    "inferred" and the returned sentence says why. A ConfigError when any measured one served
    (then nothing can be inferred)."""
    def matches(row: TableRow) -> bool:
        return all(row.params.get(k) == v for k, v in where.items())

    matching = [r for r in table.rows if matches(r)]
    measured = Counter(r.status for r in matching if r.status != NOT_REACHED)
    named = " and ".join(f"{k}={_text(v)}" for k, v in where.items())
    if not measured or SERVED in measured:
        raise ConfigError(f"cannot infer the unreached configurations with {named}: "
                          f"the measured ones ended {dict(measured) or 'nowhere'}")
    status = measured.most_common(1)[0][0]
    unreached = sum(r.status == NOT_REACHED for r in matching)
    ended = ", ".join(f"{n} {s}" for s, n in measured.most_common())
    why = (f"{named}: all {measured.total()} measured configurations failed ({ended}); "
           f"the {unreached} not reached are taken as {status}")
    rows = tuple(dataclasses.replace(r, status=status, message=f"inferred: {why}")
                 if matches(r) and r.status == NOT_REACHED else r for r in table.rows)
    return dataclasses.replace(table, rows=rows), why
