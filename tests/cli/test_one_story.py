"""Every view tells one story (#36.5, #36.6): the compact recommendation table at 80 columns,
a tie's price in device time, the dashboard's notes after a confirmation equal to `pareto`,
launch commands that survive a paste, `export` refusing a failed trial, `autotune studies`
reading only, and no +inf told to Optuna. Studies are built with test_runner's stand-in trial
function (no vLLM)."""

from __future__ import annotations

import io
import math
import shlex

import numpy as np
import pytest
from optuna.trial import TrialState
from optuna_dashboard import get_note
from rich.console import Console

from autotune.core.analysis.recommendation import (
    TieCost,
    TieSettings,
    recommend,
    table,
)
from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.maths.durations import duration_text
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.trial.sampler_feedback import finite_values
from autotune.study.output.notes import launch_command, study_note, trial_note
from autotune.study.run.trial_function import TrialSetup
from autotune.study.store.optuna_internals import live_trial
from autotune.study.store.records import outcomes, study_data
from tests.helpers import StandIn, copy_searched, make_plan, run

LOW = Objective("low-concurrency", "mean_e2el_ms", "minimize")
HIGH = Objective("high-concurrency", "output_throughput", "maximize")


def tied_study(deployment_s: float | None = 300.0, n: int = 8, sd: float = 0.05) -> StudyData:
    """``n`` trials of one truth (every one tied with every other), 2 runs each."""
    rng = np.random.default_rng(0)
    trials = []
    for k in range(n):
        runs = tuple({"mean_e2el_ms": 1234.5 * math.exp(rng.normal(0, sd)),
                      "output_throughput": 1700.0 * math.exp(rng.normal(0, sd))} for _ in range(2))
        trials.append(TrialOutcome(k, params={"x": k}, trial_wall_s=deployment_s, results={
            p: ProfileResult(p, runs) for p in (LOW.profile, HIGH.profile)}))
    return StudyData(tuple(trials), (LOW, HIGH), noise_of(trials), None, {"x": 0},
                     loads={LOW.profile: 1, HIGH.profile: 32}, repeats=2,
                     deployment_s=deployment_s)


def test_a_ties_price_is_rounds_times_tied_trials_times_one_deployment():
    data = tied_study(deployment_s=300.0)
    rec = recommend(data, "interactive", TieSettings("s", 0.05))
    cost = rec.tie_cost
    assert cost is not None and cost.rounds > 0
    assert cost.deployments == cost.rounds * (1 + len(rec.tied))
    assert cost.seconds == pytest.approx(cost.deployments * 300.0)
    assert f"about {duration_text(cost.seconds)} of deployments" in rec.reason


@pytest.mark.parametrize("seconds, text", [(45, "45 s"), (420, "7 min"), (195, "3 min 15 s"),
                                           (6000, "1 h 40 min"), (7200, "2 h")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration_text(seconds) == text


def test_a_price_beyond_any_sensible_budget_says_so_and_what_lowers_it():
    cost = TieCost((1, 2), "x", 5.0, 0.8, 90, (), "n", "c", deployment_s=60.0, study_s=420.0)
    assert cost.seconds == 90 * 2 * 60 and cost.beyond_budget  # 3 h against a 7 min study
    assert "beyond any sensible budget" in cost.time_text
    assert "--precision" in cost.time_text and "--smallest-difference" in cost.time_text
    cheap = TieCost((1, 2), "x", 5.0, 0.8, 1, (), "n", "c", deployment_s=60.0, study_s=420.0)
    assert not cheap.beyond_budget and "beyond" not in cheap.time_text
    short_study = TieCost((1, 2), "x", 5.0, 0.8, 2, (), "n", "c", deployment_s=60.0, study_s=5.0)
    assert not short_study.beyond_budget  # 4 min: never beyond, however short the study
    unknown = TieCost((1, 2), "x", 5.0, 0.8, 3, (), "n", "c")
    assert unknown.seconds is None and unknown.price == "3 rounds"


def test_the_compact_table_fits_80_columns_for_three_uses_with_undecided_rivals():
    data = tied_study()
    recs = [recommend(data, use, TieSettings("llama-3b-1a2b3c")) for use in
            ("interactive", "throughput", "balanced")]
    assert all(r.tied for r in recs)  # every use has rivals: the widest rows
    lines = table(data, recs, "llama-3b-1a2b3c")
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    rows = [line for line in lines if line.split()[:1] and line.split()[0] in
            ("interactive", "throughput", "balanced")]
    assert len(rows) == 3
    for r, row in zip(recs, rows, strict=True):
        assert f"#{r.trial.number}" in row.split()[1]
        e = data.objective_estimate(r.trial, LOW)
        assert f"{e.mean:,.0f} [{e.low:,.0f}, {e.high:,.0f}]" in row
        said = " ".join(lines).split(f"{r.use}: #{r.trial.number} is undecided against")[1].split(": ")[1:3]
        assert f"~{duration_text(r.tie_cost.seconds)}" in " ".join(said)  # the price in time
    assert "autotune export --for balanced --study llama-3b-1a2b3c" in lines[-1]


def test_after_a_confirmation_the_notes_show_the_confirmed_front_as_pareto_prints_it(
        tmp_path, monkeypatch, capsys, pyplot_imported):
    from autotune.cli import main
    from autotune.study.run.confirm_rounds import confirm

    plan = make_plan(tmp_path, trials=6)  # its own search: resumed below, in its own folder
    study = run(plan, StandIn())
    served = [t.number for t in outcomes(study) if t.feasible][:2]
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), trials=served, rounds=2,
            trial_fn=StandIn(seed=7, sd=0.2))
    from optuna.artifacts import get_all_artifact_meta

    assert "front.png" in {m.filename for m in get_all_artifact_meta(study)}  # figures by default
    # the search resumed for one more trial rewrites the notes, confirmed numbers still in them
    study = run(make_plan(tmp_path, trials=7), StandIn(seed=3))
    assert len([t for t in outcomes(study) if t.state == "complete"]) == 7
    data = study_data(study, confirmed=True)
    text = get_note(study)
    assert text == study_note(study.study_name, data, plan.request.smallest_difference)
    import autotune.cli.common as common
    import autotune.cli.results as results

    screen = io.StringIO()  # wide: no cell wraps
    wide = Console(width=400, file=screen, highlight=False)
    for module in (common, results):
        monkeypatch.setattr(module, "out", wide)
    monkeypatch.chdir(tmp_path)
    assert main(["pareto", "--study", plan.study_name, "--storage", plan.storage]) == 0
    printed = screen.getvalue()
    front = data.front()
    assert any(t.number in served for t in front)  # a confirmed trial is on the front
    assert text.split("Front: ")[1].startswith(", ".join(t.label for t in front))
    for n in served:  # the confirmed numbers, as pareto prints them, are in the trial's note
        t = next(t for t in data.outcomes if t.number == n)
        e = data.objective_estimate(t, data.objectives[0]).text
        frozen = study.get_trials(deepcopy=False)[n]
        assert get_note(live_trial(study, frozen)) == trial_note(t, data)
        assert e in trial_note(t, data)
        if t in front:
            assert e in printed
    assert "(confirmed: " in text


def test_a_launch_command_with_hf_overrides_survives_a_paste():
    argv = ("--hf-overrides", '{"rope_scaling": {"type": "yarn", "factor": 4}}', "--tp", "1")
    line = launch_command("/models/my model", argv)
    assert shlex.split(line) == ["vllm", "serve", "/models/my model", *argv]


def test_export_refuses_a_failed_trial_in_one_line_with_exit_2(tmp_path, monkeypatch, capsys,
                                                             built_once):
    from autotune.cli import main

    plan, study = copy_searched(built_once, tmp_path)
    failed = next(t for t in outcomes(study) if t.failure is not None)
    monkeypatch.chdir(tmp_path)
    code = main(["export", "--study", plan.study_name, "--storage", plan.storage,
                 "--trial", str(failed.number)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert f"--trial {failed.number}" in captured.err and failed.failure.name in captured.err


def listing(root) -> list[tuple[str, int]]:
    return sorted((str(p), p.stat().st_size) for p in root.rglob("*"))


def test_studies_lists_a_storage_and_writes_nothing(tmp_path, monkeypatch, capsys, built_once):
    from autotune.cli import main

    plan, study = copy_searched(built_once, tmp_path)
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path)
    assert main(["studies", "--storage", plan.storage]) == 0
    out = capsys.readouterr().out
    assert listing(tmp_path) == before
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()
            if line.startswith("│")]
    found, front = outcomes(study), len(study_data(study).front())
    served = sum(t.served for t in found)
    rejected = sum(t.failure is not None and t.failure.name == "config_rejected" for t in found)
    assert [r[:6] for r in rows] == [[plan.study_name, str(len(study.trials)), str(served),
                                      str(rejected), str(len(found) - served - rejected), str(front)]]
    missing = tmp_path / "elsewhere" / "none.db"
    assert main(["studies", "--storage", f"sqlite:///{missing}"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not missing.parent.exists()


def test_no_trial_is_told_to_optuna_as_infinite_and_the_failure_class_stays_visible(tmp_path,
                                                                                   built_once):
    _, study = copy_searched(built_once, tmp_path)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert all(math.isfinite(v) for t in complete for v in t.values)
    failed = [t for t in complete if t.constraints.get("served", 0) > 0]
    assert failed and all(t.user_attrs.get("failure_class") for t in failed)


def test_finite_values_put_a_placeholder_on_the_served_trials_axis():
    told = [[100.0, 50.0], [300.0, 20.0]]
    assert finite_values([math.inf, 0.0], (LOW, HIGH), told) == [300.0, 0.0]
    assert finite_values([math.inf, 0.0], (LOW, HIGH), []) == [0.0, 0.0]
    assert finite_values([120.0, 40.0], (LOW, HIGH), told) == [120.0, 40.0]


def test_recommend_prints_the_table_and_explain_the_full_text(tmp_path, monkeypatch, capsys):
    from autotune.cli import main
    from tests.helpers import REPO

    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["import-results", str(REPO / "search_spaces" / "reference-results.csv"),
                 "--study", "published"]) == 0
    capsys.readouterr()
    assert main(["recommend", "--study", "published"]) == 0
    short = capsys.readouterr().out
    assert [line.split()[0] for line in short.splitlines()[2:5]] == [
        "interactive", "throughput", "balanced"]
    assert "To decide it" not in short and max(map(len, short.splitlines()[:5])) <= 80
    assert main(["recommend", "--study", "published", "--for", "throughput", "--explain"]) == 0
    full = capsys.readouterr().out.replace("\n", " ")
    assert "Undecided against it" in full and "To decide it:" in full


def test_the_reports_recommendations_open_with_the_table_and_keep_the_full_text():
    from autotune.study.output.report_data import Report, recommendations, recommendations_table
    from autotune.study.output.report_render import report_sections, to_markdown

    data, tie = tied_study(), TieSettings("s")
    report = Report(study_name="s", model="m", space_path="space.yaml", data=data,
                    recommendations=recommendations(data, tie), importance={}, effects=(),
                    flips=(), unconfirmed_flips=(), ttft_buckets={}, capacity_curves={},
                    table=recommendations_table(data, tie))
    (section,) = [s for s in report_sections(report) if s.title == "Recommendations"]
    markdown = to_markdown([section])
    assert markdown.index("```\n" + report.table[0]) < markdown.index("**interactive**: Trial")
    assert "To decide it:" in markdown


def test_a_new_studys_default_name_is_short_and_distinct_per_shape():
    from autotune.study.run.study_plan import default_study_name

    model = "/models/Qwen3-30B-A3B-Instruct-2507-FP8-dynamic"
    a = default_study_name(model, "default", ["low-concurrency", "high-concurrency"])
    b = default_study_name(model, "default", ["low-concurrency"])
    assert a != b and len(a) <= 39 and a.startswith("Qwen3-30B-A3B-Instruct-2507-FP8-")
    assert a == default_study_name(model, "default", ["low-concurrency", "high-concurrency"])
