"""What optuna-dashboard shows of a study: trial notes and the study note, as Markdown (saved
with ``optuna_dashboard.save_note`` by the runner). Pure text from ``StudyData``."""

from __future__ import annotations

from autotune.core.analysis.recommend import (
    SMALLEST_DIFFERENCE,
    USES,
    NoFeasibleTrial,
    TieSettings,
    recommend,
)
from autotune.core.analysis.study_data import StudyData
from autotune.core.metrics.registry import SUMMARY_METRICS
from autotune.core.trial.capacity_search import boundary_text


def trial_note(t, data: StudyData) -> str:
    """One trial: configuration, every profile's main metrics with intervals, the change
    against the baseline, launch flags."""
    title = f"## Trial {t.number}" + (f": reference `{t.reference}`" if t.reference else "")
    lines = [title, ""]
    if t.feasible or t.dominated:
        lines.append(f"Ready in {t.startup_s or 0:.0f} s.")
        if t.requests_line:
            lines.append(f"Requests per run: {t.requests_line}.")
    else:
        lines += [f"**Infeasible: {t.failure.name if t.failure else t.state}**", "",
                  f"> {t.failure_message[:500]}"]
    lines += ["", "| profile | metric | mean [95% interval] | vs baseline |", "|---|---|---|---|"]
    for profile in t.results:
        for metric in SUMMARY_METRICS:
            if not t.has(profile, metric):
                continue
            versus = data.versus_baseline(t, profile, metric)
            reached = f" ({t.reached(profile)})" if t.reached(profile) else ""
            lines.append(f"| {profile} | {metric} | {data.estimate(t, profile, metric).text}"
                         f"{reached} | {versus.text if versus else '-'} |")
    for profile, search in t.capacity.items():
        lines += ["", f"Capacity ({profile}, SLOs {', '.join(search.limits)}): "
                  f"{boundary_text(search)}. The curve is drawn by `autotune report`; every "
                  f"probe is in the trial's artifact `capacity-{profile}.json`."]
    lines += ["", "Launch flags:", "", "```", "vllm serve MODEL " + " ".join(t.argv), "```"]
    return "\n".join(lines)


def study_note(study_name: str, data: StudyData, smallest_difference: float = SMALLEST_DIFFERENCE) -> str:
    """The front and the recommended flags for each use; a tie with what resolving it would
    take (``TieCost``, as `autotune recommend` says it)."""
    feasible = data.feasible
    lines = [f"## {study_name}", "",
             f"{len(data.outcomes)} finished trials, {len(feasible)} feasible. Objectives: "
             + "; ".join(f"{o.label}, {o.direction}" for o in data.objectives) + ".",
             f"Front: {', '.join(t.label for t in data.front()) or 'none yet'}.", ""]
    for use in USES:
        try:
            rec = recommend(data, use, TieSettings(study_name, smallest_difference))
        except NoFeasibleTrial as exc:
            lines += [f"**{use}**: {exc}", ""]
            continue
        lines += [f"**{use}**: {rec.reason}", "", "```",
                  "vllm serve MODEL " + " ".join(rec.trial.argv), "```", ""]
    return "\n".join(lines)
