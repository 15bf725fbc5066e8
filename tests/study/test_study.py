"""`autotune run` end to end: real CPU deployments, a real Optuna storage, the real CLI."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from autotune.study.store import optuna_internals
from tests.helpers import REPO, autotune, load, run_args, vllm_processes

pytestmark = pytest.mark.slow


def test_a_four_trial_study_runs_references_first_and_records_both_profiles(four_trials):
    root, model, result = four_trials
    study = load(root, "s4")
    trials = study.trials
    assert all(t.state == TrialState.COMPLETE for t in trials)
    # --trials 4 counts deployed configurations: a sample of an engine already measured is a
    # copy ("same engine as #N"), stored but not deployed and not counted
    assert sum("same_engine_as" not in t.user_attrs for t in trials) == 4
    assert [t.user_attrs.get("reference") for t in trials[:2]] == ["o0", "o0-ep"]
    assert study.metric_names == ["low-concurrency:mean_e2el_ms", "high-concurrency:output_throughput"]
    good = trials[0]
    assert good.constraints["served"] == 0.0 and all(v <= 0 for v in good.constraints.values())
    assert len(good.values) == 2 and 0 < good.values[0] < float("inf") and good.values[1] > 0
    assert set(good.user_attrs["metrics"]) == {"low-concurrency", "high-concurrency"}
    assert good.user_attrs["metrics"]["low-concurrency"]["mean_e2el_ms"] == good.values[0]
    runs = good.user_attrs["repeats"]["high-concurrency"]  # one run (--repeats 1), the objective
    assert len(runs) == 1 and runs[0]["output_throughput"] == pytest.approx(good.values[1])
    stops = good.user_attrs["stops"]["low-concurrency"]  # how many requests, and why it stopped
    assert len(stops) == 1 and stops[0]["stop"] in ("precise", "ceiling")
    assert good.user_attrs["startup_s"] > 0 and good.user_attrs["teardown_clean"] is True
    phases = good.user_attrs["startup_phases"]  # between named lines of vLLM's INFO log
    assert phases["unnamed_s"] < 0.1 * good.user_attrs["startup_s"] and phases["weights_s"] > 0
    assert "compile_s" not in phases  # the first trial is the reference at -O0: nothing compiled
    assert good.user_attrs["teardown_s"] > 0 and "gpu_memory_mib" not in good.user_attrs  # CPU
    assert "--optimization-level" in good.user_attrs["argv"]
    assert good.user_attrs["vllm_version"].startswith("vllm")
    stored = optuna.artifacts.get_all_artifact_meta(good, storage=optuna_internals.storage_of(study))
    names = sorted(a.filename for a in stored)
    assert names == ["bench-high-concurrency-1.json", "bench-low-concurrency-1.json",
                     "requests-high-concurrency-1.jsonl", "requests-low-concurrency-1.jsonl",
                     "server.log"]
    assert "(4 of 4)" in result.stderr and "benchmarking high-concurrency" in result.stderr


def test_a_crashing_trial_is_infeasible_with_its_class_and_the_study_goes_on(four_trials):
    root, model, _ = four_trials
    study = load(root, "s4")
    crashed = study.trials[1]  # expert parallel: a TP worker segfaults on the CPU build
    assert crashed.user_attrs["failure_class"] == "engine_died"
    assert "died" in crashed.user_attrs["failure_message"]
    assert crashed.user_attrs["log_tail"]
    assert crashed.constraints["served"] > 0
    assert all(math.isfinite(v) for v in crashed.values)  # no "inf" on the dashboard's axis
    assert len(study.trials) > 2 and all(t.state == TrialState.COMPLETE for t in study.trials[2:])
    for t in study.trials:  # a repeat of a failed parameter set is recorded, not relaunched
        if "duplicate_of" in t.user_attrs:
            assert "startup_s" not in t.user_attrs
    assert vllm_processes(model) == []


def test_rerunning_resumes_adds_trials_and_does_not_enqueue_references_again(four_trials):
    root, model, _ = four_trials
    result = autotune(root, *run_args(root, model, "s4", 5))
    assert result.returncode == 0, result.stderr[-3000:]
    study = load(root, "s4")
    assert sum("same_engine_as" not in t.user_attrs for t in study.trials) == 5  # copies aside
    assert sum("reference" in t.user_attrs for t in study.trials) == 2
    assert not study.get_trials(states=(TrialState.WAITING,))


def test_sigint_during_a_trial_tears_down_and_leaves_the_study_consistent(study_env):
    root, model = study_env
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "--workdir", str(root / "studies"),
         *run_args(root, model, "sigint", 2)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 300
    seen = ""
    while time.monotonic() < deadline and "waiting for /health" not in seen:
        seen += proc.stderr.readline()
    assert "waiting for /health" in seen
    time.sleep(10)  # the server is starting: workers exist now
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    assert proc.returncode == 130
    assert vllm_processes(model) == []
    study = load(root, "sigint")
    trial = study.trials[0]
    assert trial.state == TrialState.FAIL
    assert trial.user_attrs["failure_class"] == "interrupted"
    assert not study.get_trials(states=(TrialState.RUNNING,))


def test_dry_run_prints_reference_argv_first_and_launches_nothing(study_env):
    root, model = study_env
    workdir = root / "dry-workdir"
    result = subprocess.run(
        [sys.executable, "-m", "autotune", "--workdir", str(workdir), "run", "--model", model,
         "--space", str(root / "space.yaml"), "--references", str(root / "refs.yaml"),
         "--seed-references", "--exploration", "sampler", "--trials", "4", "--dry-run"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    lines = [line for line in out if line.startswith("trial ")]
    # vLLM's defaults first (the baseline: no tuned flag), then the references, then samples
    assert lines[0].startswith("trial 0 (baseline: vllm-defaults): vllm serve")
    assert "--optimization-level" not in lines[0] and "--max-model-len" not in lines[0]
    assert lines[1].startswith("trial 1 (o0): vllm serve") and "--optimization-level 0" in lines[1]
    assert lines[2].startswith("trial 2 (o0-ep)") and "--enable-expert-parallel" in lines[2]
    assert lines[3].startswith("trial 3 (sampled)")
    assert out[-1] == "dry run: nothing launched, nothing written"
    assert any(line.startswith("creates study ") for line in out)
    assert not workdir.exists()
