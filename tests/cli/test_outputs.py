"""`--format json|csv` of trials, pareto, recommend and studies: parsed back, every field
checked against the stored study (docs/outputs.md is the schema)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import shutil
from pathlib import Path

import pytest

from autotune.core.trial.precision import RunStop
from autotune.study.output.documents import CSV_COLUMNS, SCHEMA
from tests.helpers import failed, served, store, with_capacity

NAME = "weekly-glm-h100-throughput-study-2026"  # longer than an 80-column row leaves


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> str:
    """#0 the baseline, #1 lower latency but less throughput (with a capacity search), #2
    rejected by vLLM, #3 dominated by #0 on both objectives; stored once for the module (the
    reading commands write nothing: test_cli_errors.py checks it byte for byte)."""
    trials = [served(e2el_ms=1000, throughput=2000, reference="default"),
              with_capacity(served(e2el_ms=800, throughput=1600, params={"max_num_seqs": 128}),
                            [(4, 800), (16, 1500), (64, 2500)], met=16, missed=64),
              failed("Value error, max_num_batched_tokens (2048) is smaller than max_model_len"),
              served(e2el_ms=1500, throughput=1000, params={"max_num_seqs": 64})]
    return store(tmp_path_factory.mktemp("outputs") / "studies", trials, name=NAME, baseline="default",
                 profiles=("low-concurrency", "high-concurrency", "capacity"))


@pytest.fixture
def cli(cli):
    """The shared in-process command line, its stdout once it exits 0."""
    def run(*args: str) -> str:
        code, out, err = cli(*args)
        assert code == 0, err
        return out
    return run


def report_text(study: str, storage: str, out: Path) -> str:
    """report.md as `autotune report --study STUDY --storage STORAGE --out OUT` writes it (its
    one call, ``write_report``), without drawing the figures it names: the subject here is
    its words (test_results.py and test_plot_data.py draw them)."""
    from autotune.study.output.report import write_report
    from autotune.study.store.storage import close_readers, load_existing

    write_report(load_existing(study, storage), out, figures=False)
    close_readers()  # as `main` does when a command ends
    return (out / "report.md").read_text()


def test_trials_json_holds_every_trial_with_its_flags_metrics_intervals_phases_and_stops(cli, stored):
    doc = json.loads(cli("trials", "--study", NAME, "--storage", stored, "--format", "json"))
    assert (doc["schema"], doc["study"], doc["baseline"]) == (SCHEMA, NAME, 0)
    assert doc["objectives"] == ["low-concurrency:mean_e2el_ms", "high-concurrency:output_throughput"]
    assert (doc["smallest_difference_pct"], doc["configurations_measured"], doc["searched"]) == (5, 3, 2)
    trials = {t["number"]: t for t in doc["trials"]}
    assert sorted(trials) == [0, 1, 2, 3]
    assert [trials[n]["outcome"] for n in range(4)] == ["ok", "ok", "config_rejected", "ok"]
    assert [trials[n]["on_front"] for n in range(4)] == [True, True, False, False]
    assert trials[1]["flags"] == ["--max-num-seqs", "128"] and trials[1]["params"] == {"max_num_seqs": 128}
    assert trials[1]["changes"] == {"max_num_seqs": 128} and trials[0]["changes"] == {}
    assert trials[2]["failure_message"].startswith("Value error, max_num_batched_tokens (2048)")
    assert trials[2]["served"] is False and trials[2]["profiles"] == {}
    e2el = trials[1]["profiles"]["low-concurrency"]["metrics"]["mean_e2el_ms"]
    assert e2el["mean"] == pytest.approx(800) and e2el["lo"] < 800 < e2el["hi"]
    # Its repeats spread more (1.4%) than the assumed 1% between GPU deployments: the interval
    # rests on them, and the field says so.
    assert e2el["deployments"] == 1 and e2el["noise"].startswith("repeats: 1.4% pooled")
    throughput = trials[0]["profiles"]["high-concurrency"]["metrics"]["output_throughput"]
    assert throughput["mean"] == pytest.approx(2000)
    assert trials[0]["profiles"]["low-concurrency"]["stops"] == [
        {"requests": 40, "reason": "precise", "reached_concurrency": 2, "concurrency": 2,
         "max_run_s": None},
        {"requests": 60, "reason": "precise", "reached_concurrency": 2, "concurrency": 2,
         "max_run_s": None}]
    assert trials[0]["startup_s"] == 75.0 and trials[0]["startup_phases"]["compile_cache"] == "miss"
    probes = trials[1]["capacity"]["capacity"]["probes"]
    assert [p["load"] for p in probes] == [4, 16, 64]
    assert trials[1]["capacity"]["capacity"]["boundary"]["load"] == 16


def test_trials_csv_is_one_row_per_trial_profile_and_metric_with_lo_hi_bounds(cli, stored):
    rows = list(csv.DictReader(io.StringIO(
        cli("trials", "--study", NAME, "--storage", stored, "--format", "csv"))))
    assert list(rows[0]) == list(CSV_COLUMNS["trials"])
    assert list(dict.fromkeys(r["number"] for r in rows)) == ["0", "1", "2", "3"]
    [tput] = [r for r in rows if (r["number"], r["profile"], r["metric"])
              == ("0", "high-concurrency", "output_throughput")]
    assert float(tput["mean"]) == pytest.approx(2000) and float(tput["lo"]) < 2000 < float(tput["hi"])
    [rejected] = [r for r in rows if r["number"] == "2"]  # measured nothing: one row, no metric
    assert (rejected["outcome"], rejected["profile"], rejected["metric"], rejected["mean"]) == (
        "config_rejected", "", "", "")
    one = next(r for r in rows if r["number"] == "1" and r["profile"] == "low-concurrency")
    assert (one["flags"], one["params"], one["changes"]) == (
        "--max-num-seqs 128", "max_num_seqs=128", "max_num_seqs=128")
    assert (one["requests"], one["stop_reasons"]) == ("40+60", "precise+precise")
    [cap] = {(r["capacity_met"], r["capacity_missed"]) for r in rows
             if r["number"] == "1" and r["profile"] == "capacity"}
    assert tuple(map(float, cap)) == (16, 64)


def test_pareto_json_is_the_front_with_intervals_and_verdicts_against_the_baseline(cli, stored):
    doc = json.loads(cli("pareto", "--study", NAME, "--storage", stored, "--format", "json"))
    front = {m["number"]: m for m in doc["front"]}
    assert sorted(front) == [0, 1]
    e2el = front[1]["objectives"]["low-concurrency:mean_e2el_ms"]
    assert e2el["mean"] == pytest.approx(800) and e2el["lo"] < 800 < e2el["hi"]
    versus = front[1]["vs_baseline"]["low-concurrency:mean_e2el_ms"]
    assert versus["verdict"] == "better" and versus["change_pct"] == pytest.approx(-20)
    assert versus["difference"] == pytest.approx(800 - 1000)  # in the metric's own unit, ms
    assert versus["margin_pct"] == doc["smallest_difference_pct"] == 5
    assert front[0]["vs_baseline"]["low-concurrency:mean_e2el_ms"] is None  # the baseline itself
    assert front[1]["changes"] == {"max_num_seqs": 128} and front[1]["differs_from"] == "baseline"
    assert front[1]["flags"] == ["--max-num-seqs", "128"]


def test_pareto_csv_has_one_row_per_front_member_and_objective(cli, stored):
    rows = list(csv.DictReader(io.StringIO(
        cli("pareto", "--study", NAME, "--storage", stored, "--format", "csv"))))
    assert [(r["number"], r["objective"]) for r in rows] == [
        (n, o) for n in ("1", "0")
        for o in ("low-concurrency:mean_e2el_ms", "high-concurrency:output_throughput")]
    one = next(r for r in rows if r["number"] == "1" and r["metric"] == "output_throughput")
    assert float(one["mean"]) == pytest.approx(1600)
    assert (one["verdict"], float(one["change_pct"])) == ("worse", pytest.approx(-20))
    assert one["capacity"] == "capacity met 16 missed 64"
    base = next(r for r in rows if r["number"] == "0")
    assert (base["verdict"], base["change_pct"]) == ("", "")  # the baseline: no comparison


def test_recommend_json_names_each_uses_pick_its_verdict_flags_and_what_was_searched(cli, stored):
    doc = json.loads(cli("recommend", "--study", NAME, "--storage", stored, "--format", "json"))
    picks = {r["use"]: r for r in doc["recommendations"]}
    assert picks["interactive"]["trial"] == 1 and picks["throughput"]["trial"] == 0
    assert picks["interactive"]["verdict"] == "better"
    assert picks["interactive"]["comparisons"]["low-concurrency:mean_e2el_ms"]["verdict"] == "better"
    # the baseline is the best: keep it; no comparison, so no verdict word of its own
    assert (picks["throughput"]["is_baseline"], picks["throughput"]["verdict"]) == (True, "")
    assert picks["interactive"]["flags"] == ["--max-num-seqs", "128"]
    assert {(p["configurations_measured"], p["searched"]) for p in picks.values()} == {(3, 2)}
    assert picks["interactive"]["reason"]
    rows = list(csv.DictReader(io.StringIO(
        cli("recommend", "--study", NAME, "--storage", stored, "--format", "csv"))))
    assert list(rows[0]) == list(CSV_COLUMNS["recommend"])
    assert list(dict.fromkeys((r["use"], r["trial"]) for r in rows)) == [
        (u, str(p["trial"])) for u, p in picks.items()]


def test_recommend_csv_gives_the_picks_verdict_and_each_objectives_apart(cli, stored):
    """The CSV's ``verdict`` is the JSON's (the pick's combined verdict) on every row of a use;
    the row's objective has its own, ``objective_verdict``, with the equivalence test's
    interval (``tost_lo_pct`` .. ``tost_hi_pct``)."""
    doc = json.loads(cli("recommend", "--study", NAME, "--storage", stored, "--format", "json"))
    assert doc["schema"] == SCHEMA == 3
    rows = list(csv.DictReader(io.StringIO(
        cli("recommend", "--study", NAME, "--storage", stored, "--format", "csv"))))
    for pick in doc["recommendations"]:
        mine = [r for r in rows if r["use"] == pick["use"]]
        assert mine and {r["verdict"] for r in mine} == {pick["verdict"]}
        for r in mine:
            c = pick["comparisons"].get(r["objective"])
            if c is None:
                assert r["objective_verdict"] == r["tost_lo_pct"] == r["tost_hi_pct"] == ""
                continue
            assert r["objective_verdict"] == c["verdict"]
            assert (float(r["tost_lo_pct"]), float(r["tost_hi_pct"])) == pytest.approx(
                (c["tost_lo_pct"], c["tost_hi_pct"]))
            assert float(r["tost_lo_pct"]) <= float(r["change_pct"]) <= float(r["tost_hi_pct"])
    interactive = [r for r in rows if r["use"] == "interactive"]
    assert {r["verdict"] for r in interactive} == {"better"}
    assert any(r["objective_verdict"] == "better" for r in interactive)


def test_studies_json_and_csv_count_served_rejected_and_failed_apart(cli, stored):
    [study] = json.loads(cli("studies", "--storage", stored, "--format", "json"))["studies"]
    assert {k: study[k] for k in ("study", "trials", "served", "rejected", "failed", "front",
                                  "configurations_measured", "searched")} == {
        "study": NAME, "trials": 4, "served": 3, "rejected": 1, "failed": 0, "front": 2,
        "configurations_measured": 3, "searched": 2}
    [row] = csv.DictReader(io.StringIO(cli("studies", "--storage", stored, "--format", "csv")))
    assert (row["study"], row["served"], row["rejected"]) == (NAME, "3", "1")


def test_served_is_one_rule_for_the_trial_rows_and_the_study_counts():
    """``TrialOutcome.served``, read by `trials` and `studies` alike: a capacity-only trial
    whose search stopped below the incumbent's load served (its probes are its measurements)
    though it holds no results; a trial past its SLO did not."""
    from autotune.core.analysis.study_data import StudyData, noise_of
    from autotune.core.deployment import failures
    from autotune.core.trial.capacity_search import Boundary
    from autotune.core.trial.objectives import parse_objective
    from autotune.core.trial.outcome import ProfileResult, TrialOutcome
    from autotune.study.output.documents import study_record, trial_record
    from tests.helpers import run_metrics

    def capacity(number: int, boundary: Boundary, **fields) -> TrialOutcome:
        t = with_capacity(TrialOutcome(number, params={"max_num_seqs": 2 ** number}, **fields),
                          [(4, 800), (16, 2500)], met=4, missed=16)
        search = t.capacity["capacity"]
        return dataclasses.replace(t, capacity={"capacity": dataclasses.replace(search, boundary=boundary)})

    at_4 = ProfileResult("capacity", (run_metrics(600, 400), run_metrics(610, 395)))
    found = (capacity(0, Boundary(4, 16, 4, "resolved", 2), results={"capacity": at_4}),
             capacity(1, Boundary(None, 4, None, "below the incumbent", 1, below_incumbent=0)),
             capacity(2, Boundary(None, 4, None, "no load met the SLOs", 1),
                      failure=failures.SLO_VIOLATED, failure_message="capacity: no load met"),
             failed("Value error, max_num_seqs is too large"))
    objectives = (parse_objective("capacity:output_throughput:max", ["capacity"]),)
    data = StudyData(found, objectives, noise_of(found))
    rows = [trial_record(data, t) for t in found]
    assert [(r.outcome, r.served, r.profiles == {}) for r in rows] == [
        ("ok", True, False), ("dominated", True, True), ("slo_violated", False, True),
        ("config_rejected", False, True)]
    counted = study_record("s", data, trials=4, unfinished=0, created="")
    assert (counted.served, counted.rejected, counted.failed) == (sum(r.served for r in rows), 1, 1)


def test_studies_fits_80_columns_and_never_cuts_a_name(cli, stored, tmp_path):
    shutil.copytree(Path(stored.removeprefix("sqlite:///")).parent, tmp_path / "studies")
    text = cli("studies", "--storage", "sqlite:///studies/autotune.db")  # the test's cwd
    assert text.splitlines()[0] == "studies in sqlite:///studies/autotune.db"
    assert all(len(line) <= 80 for line in text.splitlines())
    assert any(NAME in line for line in text.splitlines())  # whole, on one line
    assert "rejected" in text and "served" in text


def test_the_walker_renders_enums_infinities_and_nested_records_as_json():
    from autotune.core.maths.stats import Verdict
    from autotune.study.output.documents import to_json

    assert to_json({"rate": math.inf, "v": Verdict.BETTER, "x": math.nan, "s": (RunStop(4, "precise"),)}) == {
        "rate": "inf", "v": "better", "x": None,
        "s": [{"requests": 4, "reason": "precise", "reached_concurrency": 0, "concurrency": 0,
               "max_run_s": None}]}


# ---------------------------------------------------------------- one schema, whatever the study holds


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> str:
    """Another study, unlike ``stored``: no baseline, no capacity search, nothing rejected."""
    trials = [served(e2el_ms=900, throughput=1800, params={"max_num_seqs": 32}),
              served(e2el_ms=1100, throughput=2100, params={"max_num_seqs": 512})]
    return store(tmp_path_factory.mktemp("plain") / "studies", trials, name="plain")


@pytest.mark.parametrize("command", ["trials", "pareto", "recommend", "studies"])
def test_each_command_has_one_fixed_csv_column_set_whatever_the_study_holds(cli, stored, plain,
                                                                           command):
    def header(study: str, storage: str) -> list[str]:
        where = ["--storage", storage] if command == "studies" else ["--study", study, "--storage", storage]
        return next(csv.reader(io.StringIO(cli(command, *where, "--format", "csv"))))

    assert header(NAME, stored) == header("plain", plain) == list(CSV_COLUMNS[command])
    columns = CSV_COLUMNS[command]
    assert not [c for c in columns if "pct" in c and not c.endswith("_pct")]
    assert not [c for c in columns if c.startswith("vs_baseline")]


def _documented_columns(command: str) -> list[str]:
    text = (Path(__file__).parents[2] / "docs" / "outputs.md").read_text()
    section = text.split(f"## `{command}`", 1)[1].split("\n## ", 1)[0]
    line = next(x for x in section.splitlines() if x.startswith("CSV columns:"))
    return [c.strip(" `.") for c in line.removeprefix("CSV columns:").split(",")]


@pytest.mark.parametrize("command", ["trials", "pareto", "recommend", "studies"])
def test_docs_outputs_lists_every_csv_column_and_json_field_the_command_prints(cli, stored, command):
    from autotune.study.output import documents

    assert _documented_columns(command) == list(CSV_COLUMNS[command])
    record = {"trials": documents.TrialRecord, "pareto": documents.FrontRecord,
              "recommend": documents.RecommendationRecord, "studies": documents.StudyRecord}[command]
    text = (Path(__file__).parents[2] / "docs" / "outputs.md").read_text()
    section = text.split(f"## `{command}`", 1)[1].split("\n## ", 1)[0]
    missing = [f.name for f in dataclasses.fields(record) if f"`{f.name}`" not in section]
    assert not missing, f"docs/outputs.md, {command}: fields not described: {missing}"
    where = ["--storage", stored] if command == "studies" else ["--study", NAME, "--storage", stored]
    doc = json.loads(cli(command, *where, "--format", "json"))
    head = [k for k in doc if not isinstance(doc[k], list)]
    assert not [k for k in head if f"`{k}`" not in section], "document fields not described"


def test_docs_outputs_lists_every_stop_reason():
    from autotune.core.trial.precision import STOP_REASONS

    text = (Path(__file__).parents[2] / "docs" / "outputs.md").read_text()
    assert [r for r in STOP_REASONS if f"`{r}`" not in text] == []


# ---------------------------------------------------------------- one row model, three renderers


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory) -> str:
    """``stored``'s trials, #0 confirmed by two more deployments whose numbers differ from its
    search's: every output must show the confirmed estimate, never the search's."""
    import optuna

    from autotune.core.trial.outcome import ProfileResult
    from autotune.study.store.state import add_confirmed
    from tests.helpers import run_metrics

    trials = [served(e2el_ms=1262, throughput=819, reference="default"),
              served(e2el_ms=1100, throughput=700, params={"max_num_seqs": 128})]
    url = store(tmp_path_factory.mktemp("confirmed") / "studies", trials, name="c",
                baseline="default")
    study = optuna.load_study(study_name="c", storage=url)
    for e2el, tput in ((1250, 700), (1256, 706)):
        add_confirmed(study, {0: {
            "low-concurrency": ProfileResult("low-concurrency", (run_metrics(e2el, tput / 4),) * 2),
            "high-concurrency": ProfileResult("high-concurrency", (run_metrics(4 * e2el, tput),) * 2)}})
    return url


def test_the_same_trial_shows_the_same_estimate_interval_and_confirmation_everywhere(
        cli, confirmed, tmp_path, monkeypatch):
    import optuna

    from autotune.study.output.documents import Interval, trial_record
    from autotune.study.output.notes import study_note, trial_note
    from autotune.study.store.records import study_data

    monkeypatch.setenv("COLUMNS", "200")
    doc = json.loads(cli("trials", "--study", "c", "--storage", confirmed, "--format", "json"))
    zero = next(t for t in doc["trials"] if t["number"] == 0)
    assert zero["confirmed"] is True
    e2el = Interval(**zero["profiles"]["low-concurrency"]["metrics"]["mean_e2el_ms"])
    tput = Interval(**zero["profiles"]["high-concurrency"]["metrics"]["output_throughput"])
    assert e2el.deployments == 3 and e2el.mean == pytest.approx((1262 + 1250 + 1256) / 3)
    shown = (e2el.text, tput.text)
    front = json.loads(cli("pareto", "--study", "c", "--storage", confirmed, "--format", "json"))
    member = next(m for m in front["front"] if m["number"] == 0)
    assert Interval(**member["objectives"]["low-concurrency:mean_e2el_ms"]).text == e2el.text
    table = cli("trials", "--study", "c", "--storage", confirmed)
    pareto = cli("pareto", "--study", "c", "--storage", confirmed)
    report = report_text("c", confirmed, tmp_path / "r")
    study = optuna.load_study(study_name="c", storage=confirmed)
    data = study_data(study)
    note = trial_note(data.outcomes[0], data)
    for text in (table, pareto, report, note):
        assert all(s in text for s in shown)
        assert "confirmed" in text
    assert "1,262" not in table  # the search's own mean: never shown where confirmed ones exist
    assert trial_record(data, data.outcomes[0]).confirmed
    assert "(confirmed: #0)" in study_note("c", data)


# ---------------------------------------------------------------- one sign, one unit, one vocabulary


def test_pareto_and_recommend_give_the_picks_change_with_one_sign(cli, stored):
    front = json.loads(cli("pareto", "--study", NAME, "--storage", stored, "--format", "json"))
    one = next(m for m in front["front"] if m["number"] == 1)
    recs = json.loads(cli("recommend", "--study", NAME, "--storage", stored, "--format", "json"))
    balanced = next(r for r in recs["recommendations"] if r["use"] == "balanced")
    assert balanced["trial"] == 1
    for name, versus in one["vs_baseline"].items():
        assert balanced["comparisons"][name]["change_pct"] == pytest.approx(versus["change_pct"])
    table = " ".join(cli("recommend", "--study", NAME, "--storage", stored).split())
    # #1 is 20% lower on latency and 20% lower on throughput than #0, in every output
    assert "#1 is undecided against #0 (-20.0%/-20.0%)" in table
    assert "-20.0%" in cli("pareto", "--study", NAME, "--storage", stored)


@pytest.mark.parametrize("given", ["5%", "5", " 5 %"])
def test_smallest_difference_takes_a_percentage_with_or_without_the_sign(cli, stored, given):
    doc = json.loads(cli("recommend", "--study", NAME, "--storage", stored, "--format", "json",
                         "--smallest-difference", given))
    assert doc["smallest_difference_pct"] == 5


@pytest.mark.parametrize(("given", "meant"), [("0.05", "5%"), ("0.3", "30%"), ("0.001", "0.1%")])
def test_a_smallest_difference_below_half_a_percent_is_refused_naming_what_was_meant(
        stored, capsys, given, meant):
    from autotune.cli import main

    code = main(["recommend", "--study", NAME, "--storage", stored, "--smallest-difference", given])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert f"did you mean {meant}?" in line and "--smallest-difference" in line


@pytest.mark.parametrize("command", ["pareto", "recommend"])
def test_every_legend_prints_the_smallest_difference_in_force(cli, stored, command):
    text = " ".join(cli(command, "--study", NAME, "--storage", stored,
                        "--smallest-difference", "30").split())
    assert "within +/-30% (the smallest difference)" in text and "+/-5%" not in text
    for word in (" tie", "tied", "ties"):
        assert word not in text


def test_the_report_uses_the_four_verdicts_and_counts_in_the_right_number(cli, stored, tmp_path):
    text = report_text(NAME, stored, tmp_path / "r")
    assert " tie" not in text and "tied" not in text
    assert "equivalent: its 90% interval lies within +/-5%" in text
    assert "4 finished trials, 3 feasible: 3 configurations measured, 2 searched" in text
    assert "1 trials" not in text


# ---------------------------------------------------------------- 80 columns


def test_pareto_keeps_every_interval_on_one_line_at_80_columns(cli, stored, monkeypatch):
    from autotune.study.output.documents import Interval

    monkeypatch.setenv("COLUMNS", "80")
    doc = json.loads(cli("pareto", "--study", NAME, "--storage", stored, "--format", "json"))
    text = cli("pareto", "--study", NAME, "--storage", stored)
    assert all(len(line) <= 80 for line in text.splitlines())
    for member in doc["front"]:
        for interval in member["objectives"].values():
            assert Interval(**interval).text in text
        for versus in member["vs_baseline"].values():
            if versus:
                assert f"{versus['change_pct']:+.1f}% [{versus['change_lo_pct']:+.1f}, " \
                       f"{versus['change_hi_pct']:+.1f}]" in text


def test_trials_keeps_every_interval_on_one_line_at_80_columns(cli, stored, monkeypatch):
    from autotune.study.output.documents import Interval

    monkeypatch.setenv("COLUMNS", "80")
    doc = json.loads(cli("trials", "--study", NAME, "--storage", stored, "--format", "json"))
    text = cli("trials", "--study", NAME, "--storage", stored)
    assert all(len(line) <= 80 for line in text.splitlines())
    for t in doc["trials"]:
        for o in doc["objectives"]:
            profile, metric = o.split(":")
            found = t["profiles"].get(profile, {}).get("metrics", {}).get(metric)
            if found and t["feasible"]:
                assert Interval(**found).text in text


def test_recommend_and_its_explanation_fit_80_columns(cli, stored, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for extra in ((), ("--explain",)):
        text = cli("recommend", "--study", NAME, "--storage", stored, *extra)
        assert all(len(line) <= 80 for line in text.splitlines()), extra
    compact = cli("recommend", "--study", NAME, "--storage", stored)
    # the export hints paste back as one command each, however long the study's name
    hints = compact.split("export a pick:\n", 1)[1].replace("\\\n", " ").split()
    assert " ".join(hints).count("autotune export") == 3 and NAME in hints


# ---------------------------------------------------------------- say what was searched


def test_a_baseline_only_study_says_it_searched_nothing_in_every_output(cli, tmp_path):
    import optuna

    from autotune.study.output.notes import study_note
    from autotune.study.store.records import study_data

    url = store(tmp_path / "b", [served(e2el_ms=1000, throughput=2000, reference="default"),
                                 failed("Value error, max_num_seqs is too large")],
                name="b", baseline="default")
    said = "1 configuration measured, nothing searched"
    compact = " ".join(cli("recommend", "--study", "b", "--storage", url).split())
    assert f"keep what you run (#0 default): {said}" in compact
    assert "nothing measured is better" not in compact  # never read as a search result
    assert said in " ".join(cli("recommend", "--study", "b", "--storage", url, "--explain").split())
    doc = json.loads(cli("recommend", "--study", "b", "--storage", url, "--format", "json"))
    assert (doc["configurations_measured"], doc["searched"]) == (1, 0)
    assert {(r["configurations_measured"], r["searched"]) for r in doc["recommendations"]} == {(1, 0)}
    assert said in " ".join(report_text("b", url, tmp_path / "r").split())
    note = study_note("b", study_data(optuna.load_study(study_name="b", storage=url)))
    assert said in " ".join(note.split())


def test_flags_are_the_words_after_vllm_serve_model_in_every_command(cli, stored):
    trials = json.loads(cli("trials", "--study", NAME, "--storage", stored, "--format", "json"))
    front = json.loads(cli("pareto", "--study", NAME, "--storage", stored, "--format", "json"))
    recs = json.loads(cli("recommend", "--study", NAME, "--storage", stored, "--format", "json"))
    by_trial = {t["number"]: t["flags"] for t in trials["trials"]}
    assert all(m["flags"] == by_trial[m["number"]] for m in front["front"])
    assert all(r["flags"] == by_trial[r["trial"]] for r in recs["recommendations"])
    assert all(not f or f[0].startswith("--") for f in by_trial.values())  # no model, no `vllm serve`
