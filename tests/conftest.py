"""Shared fixtures. Real vLLM servers are session-scoped: start-up is the expensive part.
Nothing of autotune or tests.helpers is imported at module level: xdist's controller loads
this file before it starts the workers, and their import (1 s) would delay every worker."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from autotune.core.space.model_facts import ModelInfo

HEAVY_MODULES = ("vllm", "torch", "transformers")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: a ``vllm`` test is a ``slow`` one
def pytest_collection_modifyitems(items) -> None:
    """The heavy tier's tests (marked ``vllm``) belong to the slow tier, so that ``-m "not
    slow"`` is the fast suite (#48: vLLM's import alone took 8 s a worker), and start with
    vLLM imported (``vllm_parser``)."""
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.slow)
            if "vllm_parser" not in item.fixturenames:
                item.fixturenames.insert(0, "vllm_parser")


_HEAVY_BEFORE = pytest.StashKey[set]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    item.stash[_HEAVY_BEFORE] = {name for name in HEAVY_MODULES if name in sys.modules}


@pytest.fixture(autouse=True)
def _fast_tests_import_no_heavy_module(request):
    """A fast test (not ``slow``) whose fixtures or body import vLLM, torch or transformers
    fails: one such import would bring vLLM's 8 s back into every worker of the fast suite."""
    yield
    before = request.node.stash.get(_HEAVY_BEFORE, set())
    if request.node.get_closest_marker("slow") is None:
        new = [name for name in HEAVY_MODULES if name in sys.modules and name not in before]
        assert not new, (f"{request.node.nodeid} imported {', '.join(new)}: mark it "
                         "`vllm` (the heavy tier, run with the slow tests) or import lazily")


@pytest.fixture(scope="session", autouse=True)
def _alembic_scripts_read_once():
    """Optuna's alembic migration scripts, read once per process: each ``RDBStorage`` loads
    its ~30 scripts to find the schema head (23 of the 27 ms of opening an existing SQLite
    study) and, for a new database, again to stamp it (20 of 40 ms). The scripts are a fact
    of the installed Optuna and name no database, so the checks and the stamp still run, on
    the same answer."""
    from optuna.storages._rdb.storage import _VersionManager

    make = _VersionManager._create_alembic_script
    scripts: list = []

    def read_once(self):
        if not scripts:
            scripts.append(make(self))
        return scripts[0]

    _VersionManager._create_alembic_script = read_once
    yield
    _VersionManager._create_alembic_script = make


@pytest.fixture(scope="session")
def vllm_parser() -> None:
    """vLLM's `serve` parser, built once per test process before the first test of the heavy
    tier: importing vLLM for it takes 7 s on 2 quiet cores (torch's inductor, vLLM's configs),
    a fixed cost of the tier that --durations then shows as this fixture's setup, not as the
    call of whichever test happens to run first."""
    from autotune.shell.server.validation import shared_validator

    validator = shared_validator()
    if validator is not None:
        validator.accepts([])


@pytest.fixture(scope="session")
def built_once(tmp_path_factory):
    """``built_once(key, build, into)``: a folder built once per test process and copied per
    test. The first time ``key`` is asked for, ``build(folder)`` fills a fresh folder (a stored
    study, say) and what it returns is kept; every call copies that folder into ``into`` and
    returns the kept value. Each test gets the same bytes, as if it had built them itself (a
    file copy takes ~1 ms where storing a study takes 0.2-0.4 s; ``copy_built``)."""
    from tests.helpers import copy_built, fold_sqlite_logs

    built: dict[str, tuple[Path, object]] = {}

    def copy(key: str, build, into: Path):
        if key not in built:
            folder = tmp_path_factory.mktemp("built")
            built[key] = (folder, build(folder))
            fold_sqlite_logs(folder)
        folder, value = built[key]
        copy_built(folder, into)
        return value
    return copy


@pytest.fixture(scope="session")
def pyplot_imported() -> None:
    """matplotlib's pyplot (0.6 s) imported, and a first figure drawn (its fonts loaded,
    0.3 s), once per process as a fixture's setup: the tests that draw figures are timed
    without these fixed costs of whichever comes first."""
    import matplotlib

    matplotlib.use("Agg")  # as study/output/plots.py does before its import
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_title("fonts")
    fig.canvas.draw()
    plt.close(fig)


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """Screenshots kept with the test output (test-artifacts/, git-ignored) to look at."""
    from tests.helpers import REPO

    path = REPO / "test-artifacts" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """The real command line, in this process, in ``tmp_path``: (exit code, stdout, stderr)."""
    from autotune.cli import main

    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err
    return run


@pytest.fixture
def moe_mtp_info() -> ModelInfo:
    from autotune.core.space.model_facts import parse_config
    from tests.helpers import GLM_MOE_MTP_CONFIG

    return parse_config("/models/moe", GLM_MOE_MTP_CONFIG)


@pytest.fixture
def dense_info() -> ModelInfo:
    from autotune.core.space.model_facts import parse_config
    from tests.helpers import LLAMA_CONFIG

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

@pytest.fixture(scope="session")
def study_env(tmp_path_factory, moe_model):
    from tests.helpers import REAL_STUDY_REFERENCES, REAL_STUDY_SPACE

    root = tmp_path_factory.mktemp("study")
    (root / "space.yaml").write_text(REAL_STUDY_SPACE)
    (root / "refs.yaml").write_text(REAL_STUDY_REFERENCES)
    return root, moe_model


@pytest.fixture(scope="session")
def four_trials(study_env):
    from tests.helpers import autotune, run_args

    root, model = study_env
    result = autotune(root, *run_args(root, model, "s4", 4))
    assert result.returncode == 0, result.stderr[-3000:]
    return root, model, result




# ------------------------------------------------------------------ PostgreSQL for workers

POSTGRES_BIN = Path("/usr/lib/postgresql")  # Debian's packages (`./setup.sh --for-tests`)


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
    from tests.helpers import POSTGRES_PASSWORD

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
