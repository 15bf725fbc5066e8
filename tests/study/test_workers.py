"""Scale-out for real: worker processes with TP=1 vLLM deployments on their own cores, sharing
one study in a real PostgreSQL server (the session's own, see conftest.postgres_url)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import optuna
import pytest
from optuna.trial import TrialState

from autotune.study.store import optuna_internals
from tests.helpers import POSTGRES_PASSWORD, REPO, vllm_processes

pytestmark = pytest.mark.slow

# Eight distinct configurations of TP=1. Not -O0: on machines with AMX its eager CPU kernels
# kill the worker on the first request (SIGILL, seen 2026-12-04); -O2 compiles once, then the
# cache is warm.
SPACE = """
name: scale
deployment: {tensor_parallel_size: 1, max_model_len: 2048}
parameters:
  - {name: max_num_seqs, type: categorical, choices: [4, 8, 16, 32], default: 8, flag: --max-num-seqs}
  - {name: performance_mode, type: categorical, choices: [throughput, interactivity],
     default: throughput, flag: --performance-mode}
"""
SMALL = ["--profile", "low-concurrency", "--num-prompts", "4", "--input-len", "64", "--output-len", "16",
         "--repeats", "1", "--confirm", "0"]
HEARTBEAT = ["--heartbeat-interval", "2", "--grace-period", "10"]


@pytest.fixture(scope="module")
def scale_env(tmp_path_factory, postgres_url):
    from autotune.modelgen.checkpoints import make_model

    root = tmp_path_factory.mktemp("scale")
    (root / "space.yaml").write_text(SPACE)
    # A model of its own: the session's shared dense server must not count as a leftover.
    model = make_model(root / "dense", kind="dense", seed=1).name
    env = {**os.environ, "AUTOTUNE_STORAGE": postgres_url}  # as a user keeps the password off argv
    return root, model, postgres_url, env, uuid.uuid4().hex[:8]


def autotune_argv(root, *args: str) -> list[str]:
    return [sys.executable, "-m", "autotune", "--workdir", str(root / "studies"), *args]


def test_two_slots_run_a_four_trial_postgres_study_in_parallel_without_duplicates(scale_env):
    root, model, url, env, suffix = scale_env
    name = f"pair-{suffix}"
    result = subprocess.run(
        autotune_argv(root, "run", "--model", model, "--space", str(root / "space.yaml"),
                      "--study", name, "--trials", "4", "--seed", "1", "--cores", "0,1",
                      *SMALL, *HEARTBEAT),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    study = optuna.load_study(study_name=name, storage=url)
    # four deployed configurations; a sample of an engine already measured is a stored copy,
    # not deployed and not counted
    done = [t for t in study.get_trials(states=(TrialState.COMPLETE,))
            if "same_engine_as" not in t.user_attrs]
    assert len(done) == 4
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    assert all(t.user_attrs.get("skipped") for t in study.get_trials(states=(TrialState.FAIL,)))
    # vLLM's defaults first, at the model's native context; three other configurations, none
    # deployed twice (a sampled one may hold the defaults' values at the space's 4096 tokens)
    base = [t for t in done if t.user_attrs.get("reference") == "vllm-defaults"]
    assert len(base) == 1 and base[0].number == 0
    assert len({json.dumps(t.params, sort_keys=True) for t in done if t not in base}) == 3
    assert all(not t.user_attrs.get("failure_class") and t.values[0] > 0 for t in done), [
        (t.user_attrs.get("failure_class"), t.user_attrs.get("failure_message", "")[:300], t.values)
        for t in done]
    workers = {t.user_attrs["worker"]["label"]: t.user_attrs["worker"]["slot"] for t in done}
    assert workers == {"slot0": "cores 0", "slot1": "cores 1"}
    # The slots really ran side by side: some trial of one overlaps a trial of the other.
    spans = [(t.datetime_start, t.datetime_complete, t.user_attrs["worker"]["label"]) for t in done]
    assert any(a[2] != b[2] and a[0] < b[1] and b[0] < a[1] for a in spans for b in spans)
    assert "[slot0]" in result.stderr and "[slot1]" in result.stderr
    assert POSTGRES_PASSWORD not in result.stderr + result.stdout  # the password never shows
    assert vllm_processes(model) == []


def test_a_killed_workers_trial_is_failed_by_heartbeat_and_retried_by_another_worker(scale_env):
    root, model, url, env, suffix = scale_env
    name = f"kill-{suffix}"
    first = subprocess.Popen(
        autotune_argv(root, "run", "--model", model, "--space", str(root / "space.yaml"),
                      "--study", name, "--trials", "2", "--seed", "2", "--cores", "0",
                      *SMALL, *HEARTBEAT),
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    seen = ""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and f"study '{name}'" not in seen:
        seen += first.stderr.readline()
    other = subprocess.Popen(
        autotune_argv(root, "worker", "--study", name, "--cores", "1", "--worker-label", "B",
                      *HEARTBEAT),
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    while time.monotonic() < deadline and "waiting for /health" not in seen:
        seen += first.stderr.readline()
    assert "waiting for /health" in seen, seen
    time.sleep(5)  # its server is starting: vLLM processes exist now
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    out, err = other.communicate(timeout=900)
    assert other.returncode == 0, err[-3000:]

    study = optuna.load_study(study_name=name, storage=url)
    killed = [t for t in study.trials if t.user_attrs.get("worker", {}).get("pid") == first.pid]
    assert len(killed) == 1 and killed[0].state == TrialState.FAIL
    retries = [t for t in study.trials if optuna_internals.retry_of(t) == killed[0].number]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert retries[0].params == killed[0].params and retries[0].user_attrs["worker"]["label"] == "B"
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 2
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    assert f"trial #{killed[0].number}: its worker stopped sending heartbeats" in err
    assert POSTGRES_PASSWORD not in err + out
    assert vllm_processes(model) == []  # nothing of the killed worker's deployment survives
