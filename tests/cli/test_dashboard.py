"""optuna-dashboard shows every trial's story: names, notes, attributes, artifacts, feasibility.

First in-process against the dashboard's WSGI app, then in a real headless Chromium.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow

METRICS = ["low-concurrency:mean_e2el_ms", "high-concurrency:output_throughput"]


def wsgi_get(app, path: str, query: str = "") -> tuple[str, bytes]:
    env: dict = {}
    setup_testing_defaults(env)
    env["PATH_INFO"], env["QUERY_STRING"] = path, query
    status = {}

    def start(s, headers, exc_info=None):
        status["s"] = s

    body = b"".join(app(env, start))
    return status["s"], body


@pytest.fixture(scope="module")
def app(four_trials):
    # imported here, not at collection: optuna-dashboard brings pandas and scikit-learn (1 s
    # in each process of the fast suite, which collects this all-slow module too)
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import wsgi

    root, _, _ = four_trials
    studies = root / "studies"
    return wsgi(f"sqlite:///{studies / 'autotune.db'}",
                artifact_store=FileSystemArtifactStore(str(studies / "artifacts")))


def study_detail(app, name: str) -> dict:
    status, body = wsgi_get(app, "/api/studies")
    listed = {s["study_name"]: s["study_id"] for s in json.loads(body)["study_summaries"]}
    status, body = wsgi_get(app, f"/api/studies/{listed[name]}", "after=0")
    assert status.startswith("200")
    return {"id": listed[name], **json.loads(body)}


def test_the_dashboard_serves_metric_names_notes_attributes_and_feasibility(app):
    detail = study_detail(app, "s4")
    assert detail["objective_names"] == METRICS
    assert "**interactive**" in detail["note"]["body"] and "vllm serve /" in detail["note"]["body"]
    good, crashed = detail["trials"][0], detail["trials"][1]
    assert good["constraints"] == [0.0] and crashed["constraints"] == [1.0]
    assert "inf" not in crashed["values"]  # told finite: the plot's axis never reads "inf"
    assert "## Trial 0: reference `o0`" in good["note"]["body"]
    assert "**Infeasible: engine_died**" in crashed["note"]["body"]
    attrs = {a["key"]: a["value"] for a in good["user_attrs"]}
    assert {"argv", "metrics", "startup_s", "vllm_version", "hardware"} <= set(attrs)
    crashed_attrs = {a["key"] for a in crashed["user_attrs"]}
    assert {"failure_class", "failure_message", "log_tail"} <= crashed_attrs


def test_the_dashboard_lists_and_serves_a_trials_artifacts(app):
    detail = study_detail(app, "s4")
    trial = detail["trials"][0]
    names = sorted(a["filename"] for a in trial["artifacts"])
    # One run per profile (--repeats 1), each with its per-request records.
    assert names == ["bench-high-concurrency-1.json", "bench-low-concurrency-1.json",
                     "requests-high-concurrency-1.jsonl", "requests-low-concurrency-1.jsonl",
                     "server.log"]
    bench = next(a for a in trial["artifacts"] if a["filename"] == "bench-low-concurrency-1.json")
    status, body = wsgi_get(app, f"/artifacts/{detail['id']}/{trial['trial_id']}/"
                                 f"{bench['artifact_id']}")
    assert status.startswith("200")
    assert json.loads(body)["completed"] == 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium(url: str, out: Path, *, dom: bool) -> str:
    """Headless Chromium: a screenshot of ``url`` into ``out``, or its rendered DOM."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed (./setup.sh --for-tests installs the Debian package)")
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}", "--window-size=1400,1000",
            "--virtual-time-budget=15000"]
    args += ["--dump-dom", url] if dom else [f"--screenshot={out}", url]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return result.stdout


@pytest.fixture(scope="module")
def dashboard_url(four_trials):
    root, _, _ = four_trials
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "--workdir", str(root / "studies"), "dashboard",
         "--study", "s4", "--port", str(port)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    url = proc.stdout.readline().strip()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_the_dashboard_binds_to_loopback_and_prints_the_study_url(dashboard_url):
    assert dashboard_url.startswith("http://127.0.0.1:") and "/dashboard/studies/" in dashboard_url


def test_chromium_renders_the_trial_list_and_pareto_front_with_metric_names(dashboard_url, tmp_path,
                                                                            screenshots):
    dom = chromium(dashboard_url, tmp_path / "study.png", dom=True)
    for name in METRICS:
        assert name in dom, f"{name} not rendered"
    assert "Pareto Front" in dom
    chromium(dashboard_url, screenshots / "dashboard-study.png", dom=False)
    trials_url = dashboard_url + "/trials"
    dom = chromium(trials_url, tmp_path / "trials.png", dom=True)
    assert "Trial 0" in dom and "bench-low-concurrency-1.json" in dom and "server.log" in dom
    chromium(trials_url, screenshots / "dashboard-trials.png", dom=False)
    for png in ("dashboard-study.png", "dashboard-trials.png"):
        assert (screenshots / png).stat().st_size > 20_000
