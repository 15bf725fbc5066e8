"""Results of a study of real CPU runs: pareto, recommend, export, report, import-results."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from autotune.core.analysis import TrialRecord, effects, knee, pareto_front, recommend, sign_flips
from autotune.core.flags import argv_to_options, options_to_argv
from tests.conftest import SPACES, autotune, load


def rec(n, tp, lat, *, profile="low-concurrency", **params):
    return TrialRecord(n, params, {profile: {"output_throughput": tp, "mean_e2el_ms": lat}})


def test_pareto_front_keeps_only_non_dominated_feasible_trials():
    trials = [rec(0, 100, 1000), rec(1, 200, 2000), rec(2, 90, 1100), rec(3, 150, 900),
              TrialRecord(4, {}, {}, feasible=False)]
    assert [t.number for t in pareto_front(trials, "low-concurrency")] == [1, 3]


def test_knee_is_the_front_point_nearest_the_scaled_ideal():
    front = [rec(0, 100, 500), rec(1, 180, 700), rec(2, 200, 2000)]
    assert knee(front, "low-concurrency").number == 1


def test_recommendations_name_the_trial_and_give_numbers():
    trials = [rec(0, 100, 500), rec(1, 180, 700), rec(2, 200, 2000)]
    r = recommend(trials, ["low-concurrency"], "interactive")
    assert r.trial.number == 0
    assert "lowest mean end-to-end latency" in r.reason and "500 ms" in r.reason
    assert recommend(trials, ["low-concurrency"], "throughput", trials[0]).trial.number == 2


def test_an_effect_that_flips_sign_between_profiles_is_reported():
    def two(n, mtp, low, high):
        return TrialRecord(n, {"mtp": mtp}, {
            "low-concurrency": {"output_throughput": low, "mean_e2el_ms": 1.0},
            "high-concurrency": {"output_throughput": high, "mean_e2el_ms": 1.0}})

    trials = [two(0, False, 200, 1800), two(1, True, 260, 1660)]
    assert sign_flips(effects(trials, ["low-concurrency", "high-concurrency"],
                              "output_throughput")) == ["mtp"]


def test_argv_round_trips_through_options():
    argv = ["--tensor-parallel-size", "2", "--no-enable-expert-parallel", "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":1}', "--performance-mode", "throughput"]
    assert options_to_argv(argv_to_options(argv)) == argv


def test_importing_the_reference_studys_numbers_creates_the_expected_trials_and_a_report(tmp_path):
    root = tmp_path
    result = autotune(root, "import-results", str(SPACES / "reference-results.csv"),
                      "--study", "published")
    assert result.returncode == 0, result.stderr
    assert "opt1: skipped, high-concurrency:mean_e2el_ms not given" in result.stderr
    study = load(root, "published")
    by_ref = {t.user_attrs["reference"]: t for t in study.trials}
    assert sorted(by_ref) == ["no-mtp", "opt0", "opt3-baseline"]
    assert by_ref["opt3-baseline"].values == [264.879, 1930.785, 1663.33, 14881.842]
    assert by_ref["no-mtp"].params["mtp"] is False and by_ref["opt0"].params["optimization_level"] == 0
    low = autotune(root, "import-results", str(SPACES / "reference-results.csv"), "--study", "low",
                   "--profile", "low-concurrency")
    assert "5 imported trials" in low.stdout
    opt1 = next(t for t in load(root, "low").trials if t.user_attrs["reference"] == "opt1")
    assert opt1.values[0] == pytest.approx(0.733 * 256)  # derived from req/s x 256 output tokens
    assert opt1.user_attrs["derived"] == ["low-concurrency:output_throughput"]
    report = autotune(root, "report", "--study", "published", "--out", str(root / "rep"))
    assert report.returncode == 0, report.stderr
    md = (root / "rep" / "report.md").read_text()
    # The reference study's conclusion 2 from its own numbers: MTP helps at low concurrency and
    # hurts at high concurrency.
    assert "Parameters whose throughput effect changes sign between profiles: mtp." in md
    assert "| #1 opt0 | ok | -83.6 | +511.0 | -17.2 | +14.7 |" in md
    for png in ("pareto-low-concurrency.png", "pareto-high-concurrency.png"):
        assert (root / "rep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_pareto_recommend_and_report_on_a_study_of_real_runs(four_trials):
    root, _, _ = four_trials
    from autotune.core.analysis import pareto_front
    from autotune.study.records import records

    pareto = autotune(root, "pareto", "--study", "s4")
    assert pareto.returncode == 0, pareto.stderr
    assert "Pareto front at low-concurrency" in pareto.stdout
    front = pareto_front(records(load(root, "s4")), "low-concurrency")
    assert front and all(f"\n│ {r.number} " in pareto.stdout for r in front)
    for use in ("interactive", "throughput", "balanced"):
        r = autotune(root, "recommend", "--study", "s4", "--for", use)
        assert r.returncode == 0 and r.stdout.startswith("Trial #"), r.stderr
    rep = autotune(root, "report", "--study", "s4", "--out", str(root / "report-s4"))
    assert rep.returncode == 0, rep.stderr
    html = (root / "report-s4" / "report.html").read_text()
    assert "<img src=\"pareto-low-concurrency.png\"" in html and "engine_died" in html
    png = root / "report-s4" / "pareto-high-concurrency.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_exports_carry_no_secret_and_the_yaml_is_what_vllm_parses_back_to_the_same_argv(four_trials):
    from autotune.shell.validation import VllmValidator

    root, model, _ = four_trials
    shell = autotune(root, "export", "--study", "s4", "--trial", "0", "--format", "shell").stdout
    words = shlex.split(shell)
    assert words[:3] == ["vllm", "serve", model]
    js = json.loads(autotune(root, "export", "--study", "s4", "--trial", "0", "--format", "json").stdout)
    assert js["argv"] == words[3:]
    out = root / "serve.yaml"
    r = autotune(root, "export", "--study", "s4", "--trial", "0", "--format", "yaml", "--output", str(out))
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load(out.read_text())
    assert config["model"] == model and "api-key" not in config and "port" not in config
    validator = VllmValidator()
    from_file = validator.config_file_argv(str(out))
    i = from_file.index("--model")
    assert vars(validator.engine_args(from_file[i + 1], from_file[:i] + from_file[i + 2:])) == \
        vars(validator.engine_args(model, words[3:]))
    key = re.compile(r"at-[A-Za-z0-9_-]{32}")  # the form of autotune's per-deployment API keys
    artifacts = [p.read_text(errors="replace") for p in (root / "studies" / "artifacts").rglob("*")
                 if p.is_file()]
    for text in (shell, out.read_text(), json.dumps(js), *artifacts):
        assert not key.search(text) and "--api-key" not in text


@pytest.mark.slow
def test_export_verify_relaunches_and_reports_the_difference(four_trials):
    root, _, _ = four_trials
    r = autotune(root, "export", "--study", "s4", "--trial", "0", "--verify")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stored vs relaunched" in r.stdout
    assert "low-concurrency" in r.stdout and "output_throughput" in r.stdout and "%" in r.stdout
    assert len(load(root, "s4").trials) >= 4
