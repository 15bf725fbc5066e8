"""What optuna-dashboard shows of a study: trial notes, the study note, and feasibility.

Notes are Markdown saved with ``optuna_dashboard.save_note``. optuna-dashboard 0.21 reads a
trial's feasibility from the older ``constraints`` system attribute, not from Optuna 5's
``Trial.set_constraint`` keys, so the runner mirrors the constraint values there as well.
"""

from __future__ import annotations

import optuna

from autotune.core.analysis import E2EL, THROUGHPUT, USES, TrialRecord, delta_pct, recommend
from autotune.core.objectives import UNITS

DASHBOARD_CONSTRAINTS_KEY = "constraints"


def mirror_constraints(trial: optuna.Trial, values: list[float]) -> None:
    """Write the constraint list where optuna-dashboard 0.21 looks (before ``tell``)."""
    # Private storage access: Optuna 5 has no public setter for trial system attributes.
    trial.storage.set_trial_system_attr(trial._trial_id, DASHBOARD_CONSTRAINTS_KEY, values)


def trial_note(rec: TrialRecord, argv: list[str], profiles: list[str],
               baseline: TrialRecord | None, extra: dict) -> str:
    """A human-readable summary of one trial: configuration, results, delta to the baseline."""
    title = f"## Trial {rec.number}" + (f": reference `{rec.reference}`" if rec.reference else "")
    lines = [title, ""]
    if rec.feasible:
        lines.append(f"Ready in {extra.get('startup_s', 0):.0f} s.")
    else:
        lines += [f"**Infeasible: {rec.failure_class}**", "", f"> {rec.failure_message[:500]}"]
    lines += ["", "| profile | output tok/s | mean E2EL ms | vs baseline |", "|---|---|---|---|"]
    for p in profiles:
        if not rec.feasible:
            lines.append(f"| {p} | - | - | - |")
            continue
        tp, lat = rec.value(p, THROUGHPUT), rec.value(p, E2EL)
        versus = "-"
        if baseline is not None and baseline.feasible and p in baseline.metrics:
            versus = (f"{delta_pct(tp, baseline.value(p, THROUGHPUT)):+.1f}% tok/s, "
                      f"{delta_pct(lat, baseline.value(p, E2EL)):+.1f}% E2EL")
        lines.append(f"| {p} | {tp:,.1f} | {lat:,.0f} | {versus} |")
    lines += ["", "Launch flags:", "", "```", "vllm serve MODEL " + " ".join(argv), "```"]
    return "\n".join(lines)


def study_note(study_name: str, records: list[TrialRecord], profiles: list[str],
               baseline: TrialRecord | None, argv_of: dict[int, list[str]]) -> str:
    """The Pareto summary and the recommended flags for each use."""
    lines = [f"## {study_name}", "",
             f"{len(records)} finished trials, {sum(r.feasible for r in records)} feasible. "
             f"Objectives: output throughput ({UNITS[THROUGHPUT]}, max) and mean E2EL "
             f"({UNITS[E2EL]}, min) per profile.", ""]
    for use in USES:
        try:
            rec = recommend(records, profiles, use, baseline)
        except Exception as exc:  # noqa: BLE001 - e.g. no feasible trial yet
            lines += [f"**{use}**: {exc}", ""]
            continue
        lines += [f"**{use}**: {rec.reason}", "", "```",
                  "vllm serve MODEL " + " ".join(argv_of.get(rec.trial.number, [])), "```", ""]
    return "\n".join(lines)
