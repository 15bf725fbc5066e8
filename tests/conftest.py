"""Shared fixtures. Real vLLM servers are session-scoped: start-up is the expensive part."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import optuna
import pytest
from aiohttp import web

from autotune.core.space.model_facts import ModelInfo, parse_config

REPO = Path(__file__).resolve().parent.parent
SPACES = REPO / "search_spaces"

GLM_MOE_MTP_CONFIG = {
    "architectures": ["Glm4MoeForCausalLM"], "n_routed_experts": 4, "num_nextn_predict_layers": 1,
    "max_position_embeddings": 32768, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 512,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
}
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 32768,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


@pytest.fixture(scope="session")
def searched(tmp_path_factory) -> Path:
    """One 6-trial search with the stand-in trial function (``tests.helpers.StandIn``) stored
    in SQLite, run once per session: tests copy its folder (``tests.helpers.copy_searched``),
    never read or write this one."""
    from tests.helpers import StandIn, make_plan, run

    folder = tmp_path_factory.mktemp("searched")
    run(make_plan(folder, trials=6), StandIn())
    return folder


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """Screenshots kept with the test output (test-artifacts/, git-ignored) to look at."""
    path = REPO / "test-artifacts" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def moe_mtp_info() -> ModelInfo:
    return parse_config("/models/moe", GLM_MOE_MTP_CONFIG)


@pytest.fixture
def dense_info() -> ModelInfo:
    return parse_config("/models/dense", LLAMA_CONFIG)


# ------------------------------------------------------------------ real models and servers


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def dense_model(models_dir) -> str:
    from autotune.modelgen.checkpoints import make_model

    return make_model(models_dir / "dense", kind="dense", seed=0).name


@pytest.fixture(scope="session")
def moe_model(models_dir) -> str:
    from autotune.modelgen.checkpoints import make_model

    return make_model(models_dir / "moe-mtp", kind="moe", mtp=True, seed=0).name


@pytest.fixture(scope="session")
def trained_model(models_dir) -> str:
    """The trained MoE+MTP model (modelgen.predictable), generated once per session."""
    from autotune.modelgen.checkpoints import make_model

    return make_model(models_dir / "moe-mtp-trained", kind="moe", mtp=True, trained=True).name


def cpu_slot(tp: int = 2):
    from autotune.core.deployment.slots import make_slots

    cores = sorted(os.sched_getaffinity(0))
    return make_slots("cpu", cores, tp, per_rank=max(1, len(cores) // tp))[0]


@pytest.fixture(scope="session")
def dense_server(dense_model, tmp_path_factory):
    """One real vLLM server on the tiny dense model for measurement tests, shared. TP=1 on core
    0 leaves core 1 to the API server and the client: with TP=2 on two cores the API server is
    starved and run-to-run spreads reach 40-80% (benchmarks/experiments/client_overhead.py)."""
    from autotune.core.deployment.slots import Slot
    from autotune.shell.server.server import DeploymentSpec, ServerProcess

    log = tmp_path_factory.mktemp("dense-server") / "server.log"
    spec = DeploymentSpec(
        model=dense_model, options=("--tensor-parallel-size", "1", "--max-model-len", "4096"),
        slot=Slot("cpu", (0,), 1), log_path=log, startup_timeout_s=600,
    )
    with ServerProcess(spec) as dep:
        yield dep


# ------------------------------------------------------------------ a real study, shared

# A small space for the tests: -O0/-O2 and the performance mode on every model, expert parallel
# on the MoE model (a real crash on the CPU build), at a length that needs no YaRN, and vLLM's
# sampling seed, which does nothing at temperature 0: the report must find no effect for it.
SPACE = """
name: test
deployment: {tensor_parallel_size: 2, max_model_len: 4096}
parameters:
  - {name: optimization_level, type: categorical, choices: [0, 2], default: 2, flag: --optimization-level}
  - {name: performance_mode, type: categorical, choices: [throughput, interactivity],
     default: throughput, flag: --performance-mode}
  - {name: expert_parallel, type: bool, default: false, flag: --enable-expert-parallel, applies_to: moe}
  - {name: sampling_seed, type: categorical, choices: [0, 1], default: 0, flag: --seed}
"""
REFERENCES = """
baseline: o0
configs:
  - {name: o0, params: {optimization_level: 0}}
  - {name: o0-ep, base: o0, params: {expert_parallel: true}}
"""
SMALL = ["--num-prompts", "4", "--input-len", "64", "--output-len", "16"]
PROFILES = ["--profile", "low-concurrency", "--profile", "high-concurrency"]


@pytest.fixture(scope="session")
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
    """The shared real study: the references' own baseline (o0) measured first, without the
    calibration redeployment, so that its trials are o0, o0-ep (a crash), then sampled ones.
    vLLM's defaults as the baseline are run by tests/study/test_workers.py and the dry run."""
    return ["run", *PROFILES, "--model", model, "--space", str(root / "space.yaml"),
            "--references", str(root / "refs.yaml"), "--seed-references", "--baseline", "o0",
            "--no-calibrate", "--study", study, "--trials", str(trials), "--seed", "1",
            "--confirm", "0", *SMALL]


def load(root: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{root / 'studies' / 'autotune.db'}")


def vllm_processes(model: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", model], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "vllm" in line and "pgrep" not in line]


@pytest.fixture(scope="session")
def four_trials(study_env):
    root, model = study_env
    result = autotune(root, *run_args(root, model, "s4", 4))
    assert result.returncode == 0, result.stderr[-3000:]
    return root, model, result




# ------------------------------------------------------------------ PostgreSQL for workers

POSTGRES_BIN = Path("/usr/lib/postgresql")  # Debian's packages (`./setup.sh --for-tests`)
POSTGRES_PASSWORD = "pg-test-secret"  # must never show in autotune's output


def _postgres_bin() -> Path:
    versions = sorted(POSTGRES_BIN.glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not versions:
        pytest.fail("PostgreSQL is not installed: run ./setup.sh --for-tests (Debian packages), "
                    "or set AUTOTUNE_TEST_POSTGRES to a database URL")
    return versions[-1].parent


@pytest.fixture(scope="session")
def postgres_url():
    """A private PostgreSQL server for this test session, on a free 127.0.0.1 port, with a
    password; stopped (and checked gone) when the session ends. $AUTOTUNE_TEST_POSTGRES points
    the tests at an existing database instead."""
    from autotune.shell.server.processes import die_with_parent, free_port
    from autotune.study.store.storage import storage_url

    if os.environ.get("AUTOTUNE_TEST_POSTGRES"):
        yield storage_url(os.environ["AUTOTUNE_TEST_POSTGRES"], "")
        return
    bindir = _postgres_bin()
    # Not under pytest's tmp dir: that is private to root, and the server may run as postgres.
    root = Path(tempfile.mkdtemp(prefix="autotune-test-pg-"))
    data, pwfile = root / "data", root / "pw"
    pwfile.write_text(POSTGRES_PASSWORD + "\n")
    # initdb refuses to run as root: run the server as Debian's postgres user then.
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        subprocess.run(["chown", "-R", "postgres:postgres", str(root)], check=True)
    subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "autotune",
                    f"--pwfile={pwfile}", "--auth-host=scram-sha-256", "--auth-local=trust"],
                   check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen(
        [*as_user, str(bindir / "postgres"), "-D", str(data), "-p", str(port),
         "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={root}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # a killed pytest takes the server along (runuser passes it on)
    )
    try:
        for _ in range(60):
            if subprocess.run([str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
                              ).returncode == 0:
                break
            time.sleep(0.5)
        subprocess.run([*as_user, str(bindir / "createdb"), "-h", str(root), "-p", str(port),
                        "-U", "autotune", "autotune_test"], check=True, capture_output=True)
        yield storage_url(f"postgresql://autotune:{POSTGRES_PASSWORD}@127.0.0.1:{port}/autotune_test", "")
    finally:
        # pg_ctl's fast shutdown waits until the postmaster and all its children are gone.
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@asynccontextmanager
async def stand_in_http(app: web.Application) -> AsyncIterator[str]:
    """An aiohttp stand-in server on 127.0.0.1 (a free port) for the client's tests; yields its
    URL and stops it on leaving."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
