"""Exports run as printed: the model's absolute path, the entry point and the environment the
trial was measured with, the study's fixed flags; JSON names the flags ``flags``. The slow test
runs an exported command on the CPU build and reaches ``/health``."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from autotune.core.deployment.baseline import command_words
from autotune.core.deployment.flags import argv_to_options
from autotune.core.plan.study_request import StudyRequest
from autotune.shell.server.server import exported_environment
from autotune.study.output.export import EXPORT_SCHEMA, Export, export_of
from autotune.study.run.study_plan import build_plan
from autotune.study.run.trial_function import TrialSetup, launch_of
from autotune.study.store.records import outcomes
from tests.helpers import REPO, StandIn, cpu_slot, ids, run, vllm_processes

MODULE = ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server")
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": "0-1"}
FLAGS = ("--tensor-parallel-size", "1", "--max-num-seqs", "4", "--enable-prefix-caching",
         "--speculative-config", '{"method":"mtp","num_speculative_tokens":1}')


def shell_words(text: str) -> list[str]:
    """The words a shell runs for an exported command (comments and continuations dropped)."""
    return [w for w in shlex.split(text, comments=True) if w != "\n"]


def test_the_shell_export_sets_the_environment_then_runs_the_deployed_entry_point():
    text = Export(4, "/models/q", FLAGS, entrypoint=MODULE, env=CPU_ENV).render("shell")
    command = command_words(shell_words(text))
    assert command.env == (("VLLM_CPU_KVCACHE_SPACE", "4"), ("VLLM_CPU_OMP_THREADS_BIND", "0-1"))
    assert command.words == ("--model", "/models/q", *FLAGS)
    assert shell_words(text)[2:5] == list(MODULE)
    assert text.startswith("# autotune: trial 4\n")
    assert max(len(line) for line in text.splitlines()) <= 80  # a line per option


def test_vllm_serve_takes_the_model_as_its_positional_argument():
    text = Export(1, "/models/q", ("--max-num-seqs", "4")).render("shell")
    assert shell_words(text) == ["vllm", "serve", "/models/q", "--max-num-seqs", "4"]


def test_json_names_the_flags_flags_and_carries_the_entry_point_environment_and_schema():
    data = json.loads(Export(4, "/models/q", FLAGS, entrypoint=MODULE, env=CPU_ENV).render("json"))
    assert data["schema"] == EXPORT_SCHEMA == 2 and "argv" not in data
    assert data["flags"] == list(FLAGS) and data["env"] == CPU_ENV
    assert data["command"] == [*MODULE, "--model", "/models/q", *FLAGS]
    assert data["config"]["model"] == "/models/q" and data["config"]["max-num-seqs"] == 4


def test_the_yaml_export_says_which_entry_point_and_environment_read_it():
    text = Export(4, "/models/q", FLAGS, entrypoint=MODULE, env=CPU_ENV).render("yaml")
    header = text.splitlines()[1]
    assert header == ("#   VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND=0-1 "
                      "/venv/bin/python -m vllm.entrypoints.openai.api_server --config FILE")
    assert argv_to_options(FLAGS) == {f"--{k}": v for k, v in yaml.safe_load(text).items()
                                      if k != "model"}


def test_the_exported_environment_is_what_changes_the_server_never_a_key():
    env = {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_API_KEY": "sk", "VLLM_LOGGING_LEVEL": "INFO",
           "HF_TOKEN": "hf", "VLLM_SOME_TOKEN": "t", "CUDA_VISIBLE_DEVICES": "2,3",
           "AUTOTUNE_TRIAL": "u:3", "TRITON_CACHE_DIR": "/c", "PATH": "/bin", "NCCL_P2P_DISABLE": "1"}
    assert exported_environment(env) == {"CUDA_VISIBLE_DEVICES": "2,3", "NCCL_P2P_DISABLE": "1",
                                         "VLLM_CPU_KVCACHE_SPACE": "4"}


def test_a_trial_records_how_its_server_starts_and_the_export_uses_it(tmp_path):
    """Through the runner: a stand-in measurement with the launch a real trial records."""
    model = tmp_path / "model"
    plan = _plan(tmp_path, model=str(_config_only(model)))
    slot = cpu_slot(1)

    def measured(argv, bench, setup, on_phase):
        return dataclasses.replace(StandIn()(argv, bench, setup, on_phase), **launch_of(setup))

    study = run(plan, measured, setup=TrialSetup(model="", workdir=plan.workdir, slot=slot))
    export = export_of(outcomes(study)[0])
    assert export.model == str(model) and os.path.isabs(export.model)
    assert export.entrypoint == launch_of(TrialSetup(model="", workdir=tmp_path))["entrypoint"]
    assert export.env["VLLM_CPU_OMP_THREADS_BIND"] == slot.env()["VLLM_CPU_OMP_THREADS_BIND"]
    assert "--max-num-seqs 4" in " ".join(export.flags)  # the baseline's fixed flag


def _config_only(folder: Path) -> Path:
    from tests.helpers import LLAMA_CONFIG

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    return folder


SPACE = """
name: export
deployment: {tensor_parallel_size: 1, max_model_len: 512}
parameters:
  - {name: optimization_level, type: categorical, choices: [0, 2], default: 2, flag: --optimization-level}
"""


def _plan(tmp_path: Path, model: str):
    (tmp_path / "space.yaml").write_text(SPACE)
    return build_plan(parser=None, request=StudyRequest(
        workdir=tmp_path / "studies", profiles=(ids("low-concurrency"),), model=model,
        space_path=str(tmp_path / "space.yaml"), trials=1, calibrate=False, study_name="e",
        baseline="-O0 --max-num-seqs 4 --enforce-eager"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.mark.slow
def test_the_exported_shell_command_runs_as_printed_on_the_cpu_build(tmp_path, dense_model):
    """`autotune export` of a stored trial (its launch recorded as a real trial records it),
    run by bash from another folder with only PATH and HOME in its environment (plus the host
    and port this test picks), reaches /health; then its process group is killed."""
    plan = _plan(tmp_path, dense_model)

    def measured(argv, bench, setup, on_phase):
        return dataclasses.replace(StandIn()(argv, bench, setup, on_phase), **launch_of(setup))

    run(plan, measured, setup=TrialSetup(model="", workdir=plan.workdir, slot=cpu_slot(1)))
    exported = subprocess.run(
        [sys.executable, "-m", "autotune", "--workdir", str(plan.workdir), "export", "--study",
         "e", "--trial", "0", "--format", "shell"], cwd=REPO, capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert exported.returncode == 0, exported.stderr
    text = exported.stdout
    assert "VLLM_CPU_KVCACHE_SPACE=" in text and "VLLM_CPU_OMP_THREADS_BIND=" in text
    assert f"--model {dense_model}" in text and "--max-num-seqs 4" in text
    assert "--api-key" not in text and "at-" not in text
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(["bash", "-c", text.rstrip() + f" --host 127.0.0.1 --port {port}"],
                            cwd=elsewhere, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")})
    try:
        deadline = time.monotonic() + 480
        while not _healthy(port):
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "not healthy in 480 s"
            time.sleep(2)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        log.close()
    # this server's processes only (a shared server of another test may serve the same model)
    def ours() -> list[str]:
        return [p for p in vllm_processes(dense_model) if f"--port {port}" in p]

    deadline = time.monotonic() + 30
    while ours() and time.monotonic() < deadline:
        time.sleep(1)
    assert ours() == []
