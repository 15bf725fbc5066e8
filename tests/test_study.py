"""`autotune run` end to end: real CPU deployments, a real Optuna storage, the real CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import REPO

pytestmark = pytest.mark.slow

# A small space for the tests: -O0/-O2 and the performance mode on every model, expert parallel
# on the MoE model (a real crash on the CPU build), at a length that needs no YaRN.
SPACE = """
name: test
deployment: {tensor_parallel_size: 2, max_model_len: 4096}
parameters:
  - {name: optimization_level, type: categorical, choices: [0, 2], default: 2, flag: --optimization-level}
  - {name: performance_mode, type: categorical, choices: [throughput, interactivity],
     default: throughput, flag: --performance-mode}
  - {name: expert_parallel, type: bool, default: false, flag: --enable-expert-parallel, applies_to: moe}
"""
REFERENCES = """
baseline: o0
configs:
  - {name: o0, params: {optimization_level: 0}}
  - {name: o0-ep, base: o0, params: {expert_parallel: true}}
"""
SMALL = ["--num-prompts", "4", "--input-len", "64", "--output-len", "16"]
PROFILES = ["--profile", "low-concurrency", "--profile", "high-concurrency"]


@pytest.fixture(scope="module")
def study_env(tmp_path_factory, moe_model):
    root = tmp_path_factory.mktemp("study")
    (root / "space.yaml").write_text(SPACE)
    (root / "refs.yaml").write_text(REFERENCES)
    return root, moe_model


def autotune(root: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autotune", "--workdir", str(root / "studies"), *args],
        cwd=REPO, capture_output=True, text=True, timeout=1800, **kwargs,
    )


def run_args(root: Path, model: str, study: str, trials: int) -> list[str]:
    return ["run", *PROFILES, "--model", model, "--space", str(root / "space.yaml"),
            "--references", str(root / "refs.yaml"), "--seed-references", "--study", study,
            "--trials", str(trials), "--seed", "1", *SMALL]


def load(root: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{root / 'studies' / 'autotune.db'}")


def vllm_processes(model: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", model], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "vllm" in line and "pgrep" not in line]


@pytest.fixture(scope="module")
def four_trials(study_env):
    root, model = study_env
    result = autotune(root, *run_args(root, model, "s4", 4))
    assert result.returncode == 0, result.stderr[-3000:]
    return root, model, result


def test_a_four_trial_study_runs_references_first_and_records_both_profiles(four_trials):
    root, model, result = four_trials
    study = load(root, "s4")
    trials = study.trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 4
    assert [t.user_attrs.get("reference") for t in trials[:2]] == ["o0", "o0-ep"]
    assert study.metric_names == ["low-concurrency:output_throughput", "low-concurrency:mean_e2el_ms",
                                  "high-concurrency:output_throughput", "high-concurrency:mean_e2el_ms"]
    good = trials[0]
    assert good.constraints == {"served": 0.0}
    assert len(good.values) == 4 and good.values[0] > 0 and 0 < good.values[1] < float("inf")
    assert set(good.user_attrs["metrics"]) == {"low-concurrency", "high-concurrency"}
    assert good.user_attrs["metrics"]["low-concurrency"]["output_throughput"] == good.values[0]
    assert good.user_attrs["startup_s"] > 0 and good.user_attrs["teardown_clean"] is True
    assert "--optimization-level" in good.user_attrs["argv"]
    assert good.user_attrs["vllm_version"].startswith("vllm")
    names = sorted(a["filename"] for a in optuna.artifacts.get_all_artifact_meta(good, storage=study._storage))
    assert names == ["bench-high-concurrency-1.json", "bench-low-concurrency-1.json", "server.log"]
    assert "trial 4/4" in result.stderr and "benchmarking high-concurrency" in result.stderr


def test_a_crashing_trial_is_infeasible_with_its_class_and_the_study_goes_on(four_trials):
    root, model, _ = four_trials
    study = load(root, "s4")
    crashed = study.trials[1]  # expert parallel: a TP worker segfaults on the CPU build
    assert crashed.user_attrs["failure_class"] == "engine_died"
    assert "died" in crashed.user_attrs["failure_message"]
    assert crashed.user_attrs["log_tail"]
    assert crashed.constraints["served"] > 0
    assert crashed.values[0] == 0.0 and crashed.values[1] == float("inf")
    assert all(t.state == TrialState.COMPLETE for t in study.trials[2:])
    for t in study.trials:  # a repeat of a failed parameter set is recorded, not relaunched
        if "duplicate_of" in t.user_attrs:
            assert "startup_s" not in t.user_attrs
    assert vllm_processes(model) == []


def test_rerunning_resumes_adds_trials_and_does_not_enqueue_references_again(four_trials):
    root, model, _ = four_trials
    result = autotune(root, *run_args(root, model, "s4", 5))
    assert result.returncode == 0, result.stderr[-3000:]
    study = load(root, "s4")
    assert len(study.trials) == 5
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
         "--seed-references", "--trials", "3", "--dry-run"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("trial 0 (o0): vllm serve") and "--optimization-level 0" in lines[0]
    assert lines[1].startswith("trial 1 (o0-ep)") and "--enable-expert-parallel" in lines[1]
    assert lines[2].startswith("trial 2 (sampled)")
    assert lines[-1] == "dry run: nothing launched, nothing written"
    assert not workdir.exists()
