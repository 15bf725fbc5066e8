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
def cli(tmp_path, monkeypatch, capsys):
    from autotune.cli import main

    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> str:
        code = main(list(args))
        captured = capsys.readouterr()
        assert code == 0, captured.err
        return captured.out
    return run


def test_trials_json_holds_every_trial_with_its_flags_metrics_intervals_phases_and_stops(cli, stored):
    doc = json.loads(cli("trials", "--study", NAME, "--storage", stored, "--format", "json"))
    assert (doc["schema"], doc["study"], doc["baseline"]) == (1, NAME, 0)
    assert doc["objectives"] == ["low-concurrency:mean_e2el_ms", "high-concurrency:output_throughput"]
    trials = {t["number"]: t for t in doc["trials"]}
    assert sorted(trials) == [0, 1, 2, 3]
    assert [trials[n]["outcome"] for n in range(4)] == ["ok", "ok", "config_rejected", "ok"]
    assert [trials[n]["on_front"] for n in range(4)] == [True, True, False, False]
    assert trials[1]["flags"] == ["--max-num-seqs", "128"] and trials[1]["params"] == {"max_num_seqs": 128}
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
        {"requests": 40, "reason": "precise", "reached_concurrency": 2, "concurrency": 2},
        {"requests": 60, "reason": "precise", "reached_concurrency": 2, "concurrency": 2}]
    assert trials[0]["startup_s"] == 75.0 and trials[0]["startup_phases"]["compile_cache"] == "miss"
    probes = trials[1]["capacity"]["capacity"]["probes"]
    assert [p["load"] for p in probes] == [4, 16, 64]
    assert trials[1]["capacity"]["capacity"]["boundary"]["load"] == 16


def test_trials_csv_is_one_row_per_trial_with_vllm_metric_names_and_lo_hi_bounds(cli, stored):
    rows = list(csv.DictReader(io.StringIO(
        cli("trials", "--study", NAME, "--storage", stored, "--format", "csv"))))
    assert [r["number"] for r in rows] == ["0", "1", "2", "3"]
    key = "profiles.high-concurrency.metrics.output_throughput"
    assert float(rows[0][key]) == pytest.approx(2000)
    assert float(rows[0][f"{key}_lo"]) < 2000 < float(rows[0][f"{key}_hi"])
    assert rows[2][key] == ""  # rejected: nothing measured
    assert rows[1]["flags"] == "--max-num-seqs 128"
    assert rows[0]["profiles.low-concurrency.stops.requests"] == "40+60"
    assert rows[0]["profiles.low-concurrency.stops.reason"] == "precise precise"
    assert rows[0]["startup_phases.compile_s"] == "29.0"


def test_pareto_json_is_the_front_with_intervals_and_verdicts_against_the_baseline(cli, stored):
    doc = json.loads(cli("pareto", "--study", NAME, "--storage", stored, "--format", "json"))
    front = {m["number"]: m for m in doc["front"]}
    assert sorted(front) == [0, 1]
    e2el = front[1]["objectives"]["low-concurrency:mean_e2el_ms"]
    assert e2el["mean"] == pytest.approx(800) and e2el["lo"] < 800 < e2el["hi"]
    versus = front[1]["vs_baseline"]["low-concurrency:mean_e2el_ms"]
    assert versus["verdict"] == "better" and versus["change"]["pct"] == pytest.approx(-20)
    assert front[0]["vs_baseline"]["low-concurrency:mean_e2el_ms"] is None  # the baseline itself
    assert front[1]["changes"] == {"max_num_seqs": 128} and front[1]["differs_from"] == "baseline"


def test_pareto_csv_has_one_row_per_front_member(cli, stored):
    rows = list(csv.DictReader(io.StringIO(
        cli("pareto", "--study", NAME, "--storage", stored, "--format", "csv"))))
    assert sorted(r["number"] for r in rows) == ["0", "1"]
    one = next(r for r in rows if r["number"] == "1")
    assert float(one["objectives.high-concurrency:output_throughput"]) == pytest.approx(1600)
    assert one["vs_baseline.high-concurrency:output_throughput.verdict"] == "worse"


def test_recommend_json_names_each_uses_pick_its_verdict_and_flags(cli, stored):
    doc = json.loads(cli("recommend", "--study", NAME, "--storage", stored, "--format", "json"))
    picks = {r["use"]: r for r in doc["recommendations"]}
    assert picks["interactive"]["trial"] == 1 and picks["throughput"]["trial"] == 0
    assert picks["interactive"]["vs_baseline"] == "better"
    assert picks["interactive"]["comparisons"]["low-concurrency:mean_e2el_ms"]["verdict"] == "better"
    assert picks["throughput"]["vs_baseline"] == "keep"  # the baseline is the best: keep it
    assert picks["interactive"]["flags"] == ["--max-num-seqs", "128"]
    assert picks["interactive"]["reason"]
    rows = list(csv.DictReader(io.StringIO(
        cli("recommend", "--study", NAME, "--storage", stored, "--format", "csv"))))
    assert [(r["use"], r["trial"]) for r in rows] == [(u, str(p["trial"])) for u, p in picks.items()]


def test_studies_json_and_csv_count_served_rejected_and_failed_apart(cli, stored):
    [study] = json.loads(cli("studies", "--storage", stored, "--format", "json"))["studies"]
    assert {k: study[k] for k in ("study", "trials", "served", "rejected", "failed", "front")} == {
        "study": NAME, "trials": 4, "served": 3, "rejected": 1, "failed": 0, "front": 2}
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
    from autotune.study.output.documents import Interval, flat, to_json

    assert to_json({"rate": math.inf, "v": Verdict.BETTER, "x": math.nan, "s": (RunStop(4, "precise"),)}) == {
        "rate": "inf", "v": "better", "x": None,
        "s": [{"requests": 4, "reason": "precise", "reached_concurrency": 0, "concurrency": 0}]}
    assert flat({"m": Interval(2.0, 1.0, 3.0, 1, "assumed")}) == {"m": 2.0, "m_lo": 1.0, "m_hi": 3.0}
