"""What optuna-dashboard shows of a study: trial and study notes as Markdown from ``StudyData``
(pure text), and the report's figures as artifacts (``upload_figures``). The runner saves the
notes as each trial ends; ``write_notes`` rewrites them from the confirmed numbers after a
confirmation and uploads the figures, so that the dashboard tells the story `pareto` and
`recommend` tell. Launch commands are shell-quoted: they survive a paste."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from autotune.core.analysis.recommendation import (
    SMALLEST_DIFFERENCE,
    USES,
    TieSettings,
    counted,
    recommend_each,
    searched,
    table,
)
from autotune.core.analysis.study_data import StudyData
from autotune.core.metrics.registry import SUMMARY_METRICS
from autotune.core.trial.capacity_search import boundary_text
from autotune.study.output.documents import trial_record, versus_record

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore


def trial_note(t, data: StudyData) -> str:
    """One trial as `trials --format json` has it (``TrialRecord``): configuration, every
    profile's main metrics with intervals (confirmation deployments included, said), the
    change against the baseline with its verdict, launch flags."""
    record = trial_record(data, t)
    title = (f"## Trial {t.number}" + (f": reference `{t.reference}`" if t.reference else "")
             + (" (confirmed)" if record.confirmed else ""))
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
            interval = record.metric(profile, metric)
            if interval is None or not t.has(profile, metric):
                continue
            versus = versus_record(data, t, profile, metric)
            said = versus.text if versus else "-"
            reached = f" ({t.reached(profile)})" if t.reached(profile) else ""
            lines.append(f"| {profile} | {metric} | {interval.text}{reached} | {said} |")
    for profile, search in t.capacity.items():
        lines += ["", f"Capacity ({profile}, SLOs {', '.join(search.limits)}): "
                  f"{boundary_text(search)}. The curve is drawn by `autotune report`; every "
                  f"probe is in the trial's artifact `capacity-{profile}.json`."]
    lines += ["", "Launch flags:", "", "```", launch_command(t.model, t.argv), "```"]
    return "\n".join(lines)


def study_note(study_name: str, data: StudyData, smallest_difference: float = SMALLEST_DIFFERENCE) -> str:
    """The front and the recommended flags for each use; a tie with what resolving it would
    take (``TieCost``, as `autotune recommend` says it)."""
    feasible = data.feasible
    lines = [f"## {study_name}", "",
             f"{counted(len(data.outcomes), 'finished trial')}, {len(feasible):,} feasible: "
             f"{searched(data).text}. Objectives: "
             + "; ".join(f"{o.label}, {o.direction}" for o in data.objectives) + ".",
             f"Front: {', '.join(t.label for t in data.front()) or 'none yet'}"
             + (f" (confirmed: {', '.join(f'#{n}' for n in sorted(data.confirmed))})."
                if data.confirmed else "."), ""]
    recs = recommend_each(data, USES, TieSettings(study_name, smallest_difference))
    if any(not isinstance(r, str) for r in recs):
        lines += ["```", *table(data, [r for r in recs if not isinstance(r, str)], study_name),
                  "```", ""]
    for rec in recs:
        if isinstance(rec, str):
            lines += [rec, ""]
            continue
        lines += [f"**{rec.use}**: {rec.reason}", "", "```",
                  launch_command(rec.trial.model, rec.trial.argv), "```", ""]
    return "\n".join(lines)


def launch_command(model: str, argv) -> str:
    """``vllm serve MODEL FLAGS`` quoted as a shell needs (``--hf-overrides '{...}'``)."""
    return shlex.join(["vllm", "serve", model or "MODEL", *argv])


def write_notes(study: optuna.Study, plan=None, *, figures: bool = True) -> None:
    """Rewrite the study note and every finished trial's note from the study's numbers,
    confirmed ones included (as `pareto` reads them), and with a ``plan`` (a ``StudyPlan``:
    its smallest difference, else the stored one's) the figures unless ``figures`` is off
    (0.2 s each: tests whose subject they are not). A storage error becomes a StudyError."""
    from optuna_dashboard import save_note

    from autotune.study.store import optuna_internals
    from autotune.study.store.records import study_data
    from autotune.study.store.state import read_plan
    from autotune.study.store.storage import storage_errors

    stored = plan.request if plan is not None else read_plan(study)
    smallest_difference = stored.smallest_difference if stored else SMALLEST_DIFFERENCE
    data = study_data(study, confirmed=True)
    frozen = {t.number: t for t in study.get_trials(deepcopy=False)}
    with storage_errors("dashboard notes not rewritten"):
        for t in data.outcomes:
            save_note(optuna_internals.live_trial(study, frozen[t.number]), trial_note(t, data))
        save_note(study, study_note(study.study_name, data, smallest_difference))
        if plan is not None and figures:
            upload_figures(study, data, plan.workdir / "artifacts",
                           TieSettings(study.study_name, smallest_difference))


def upload_figures(study: optuna.Study, data: StudyData, artifacts: Path, tie: TieSettings) -> list[str]:
    """The report's front (picks starred) and each pick's latency against load, as artifacts
    of the study in the dashboard's store ``artifacts``; returns their file names. Each name
    is one artifact of the study: a figure is uploaded when it is new, its stored bytes
    replaced when it changed, and left alone when the same (``keep_figure``): the notes are
    rewritten after every confirmation, and the dashboard listed a copy per rewrite."""
    import tempfile

    from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta

    from autotune.study.output.plot_data import front_plot, load_curves, load_png
    from autotune.study.output.plots import plot_front, plot_load

    picks = {use: r.trial.number for use, r in zip(USES, recommend_each(data, USES, tie), strict=True)
             if not isinstance(r, str)}
    artifacts.mkdir(parents=True, exist_ok=True)  # where the runner keeps the trials' artifacts
    store = FileSystemArtifactStore(str(artifacts))
    stored = {m.filename: m.artifact_id for m in get_all_artifact_meta(study)}
    names = []
    with tempfile.TemporaryDirectory() as folder:
        if data.feasible and len(data.objectives) > 1:
            names.append("front.png")
            plot_front(front_plot(data, picks), Path(folder) / names[-1])
        for curve in load_curves(data, picks):
            names.append(load_png(curve))
            plot_load(curve, Path(folder) / names[-1])
        for name in names:
            keep_figure(study, store, Path(folder) / name, stored.get(name))
    return names


def keep_figure(study: optuna.Study, store: FileSystemArtifactStore, path: Path,
                artifact_id: str | None) -> None:
    """Store the figure ``path`` as the study's artifact of its name: uploaded where none is
    stored (``artifact_id`` None), written over the stored bytes of ``artifact_id`` where they
    differ (or are gone from the store), untouched where they are the same."""
    from optuna.artifacts import upload_artifact
    from optuna.artifacts.exceptions import ArtifactNotFound

    if artifact_id is None:
        upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=study)
        return
    try:
        with store.open_reader(artifact_id) as stored:
            if stored.read() == path.read_bytes():
                return
    except ArtifactNotFound:
        pass
    with path.open("rb") as figure:
        store.write(artifact_id, figure)
