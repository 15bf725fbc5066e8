"""The pre-imported launcher: one process imports the entry module once, then forks each
deployment from it, in its own session, with the deployment's own argv, environment, folder and
output, and ends with everything it forked. A stand-in entry module (tests/data/launcher_standin.py,
no vLLM) stands for vLLM's here; a real vLLM server through the launcher is tested in
tests/shell/server/test_deploy.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from autotune.shell.server.preimported import EntryModule, Preimported, entry_module_of
from autotune.shell.server.processes import session_pids

STANDIN = "tests.data.launcher_standin"


@pytest.fixture
def launcher():
    failures: list[str] = []
    with Preimported(sys.executable, STANDIN, dict(os.environ), on_failure=failures.append) as it:
        it.failures = failures
        yield it


def spawn(launcher: Preimported, tmp_path: Path, *args: str, marker: str = "one"):
    child = launcher.spawn(list(args), {**os.environ, "STANDIN_MARKER": marker}, str(tmp_path))
    assert child is not None, launcher.failed
    return child


def first_line(child) -> dict:
    line = b""
    while not line.endswith(b"\n"):
        line += child.stdout.read(1)
    return json.loads(line)


def test_a_forked_deployment_runs_the_entry_module_with_its_own_argv_environment_folder_and_session(
        launcher, tmp_path):
    child = spawn(launcher, tmp_path, "exit", "3", "--port", "8000", marker="deployment-1")
    seen = first_line(child)
    assert seen == {"args": ["exit", "3", "--port", "8000"], "cwd": str(tmp_path),
                    "marker": "deployment-1", "pid": child.pid, "sid": child.pid, "preimported": True}
    assert child.wait(timeout=10) == 3 and child.poll() == 3
    assert launcher.ready_s is not None and not launcher.failures


def test_each_deployment_is_a_new_fork_of_the_same_imports(launcher, tmp_path):
    a, b = spawn(launcher, tmp_path, "exit", "0"), spawn(launcher, tmp_path, "exit", "0", marker="two")
    seen_a, seen_b = first_line(a), first_line(b)
    assert seen_a["pid"] != seen_b["pid"] and (seen_a["marker"], seen_b["marker"]) == ("one", "two")
    assert a.wait(timeout=10) == 0 and b.wait(timeout=10) == 0


def test_a_deployment_killed_by_a_signal_reports_it_as_popen_does(launcher, tmp_path):
    child = spawn(launcher, tmp_path, "sleep", "--model", "m")
    first_line(child)
    assert child.poll() is None
    # ps and pgrep see the server's command line, not the launcher's
    title = Path(f"/proc/{child.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert f"-m {STANDIN} sleep --model m" in title
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_closing_the_launcher_ends_what_it_forked(tmp_path):
    with Preimported(sys.executable, STANDIN, dict(os.environ)) as launcher:
        child = spawn(launcher, tmp_path, "sleep")
        first_line(child)
        process = launcher._proc
    assert process.poll() is not None  # the launcher's process is gone ...
    deadline = time.monotonic() + 10
    while session_pids(child.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not session_pids(child.pid)  # ... and so is the deployment it forked


def test_a_launcher_whose_imports_fail_is_not_used_and_says_why_once(tmp_path):
    failures: list[str] = []
    with Preimported(sys.executable, "tests.data.no_such_module", dict(os.environ),
                     on_failure=failures.append) as launcher:
        assert launcher.spawn(["exit", "0"], dict(os.environ), str(tmp_path)) is None
        assert launcher.spawn(["exit", "0"], dict(os.environ), str(tmp_path)) is None
    assert len(failures) == 1 and "no_such_module" in failures[0]


def test_the_launcher_runs_vllms_module_entry_points_and_its_console_script_only(tmp_path):
    assert entry_module_of(["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]) \
        == EntryModule("/venv/bin/python", "vllm.entrypoints.openai.api_server", ("--model", "m"))
    script = tmp_path / "vllm"
    script.write_text("#!/opt/py/bin/python3\nfrom vllm.entrypoints.cli.main import main\n")
    assert entry_module_of([str(script), "serve", "m"]) \
        == EntryModule("/opt/py/bin/python3", "vllm.entrypoints.cli.main", ("serve", "m"))
    wrapper = tmp_path / "bin" / "vllm"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nexec docker run vllm \"$@\"\n")
    assert entry_module_of([str(wrapper), "serve", "m"]) is None
    assert entry_module_of(["python3", "-m", "some.other.module"]) is None
    assert entry_module_of(["docker", "run", "vllm/vllm-openai"]) is None


def test_a_killed_autotune_leaves_no_forked_server(tmp_path):
    """autotune SIGKILLed mid-trial (no cleanup of its own runs): its launcher reads the end of
    its socket and kills what it forked; the servers do not wait for a reaper. The pids are
    printed once the server has said its first line: the launcher answers with the pid as it
    forks, before the child has its own session (asked sooner, the session was empty in 7
    runs of 15)."""
    import subprocess

    script = (
        "import os, sys, time\n"
        "from autotune.shell.server.preimported import Preimported\n"
        f"launcher = Preimported(sys.executable, {STANDIN!r}, dict(os.environ))\n"
        f"child = launcher.spawn(['sleep', '600'], dict(os.environ), {str(tmp_path)!r})\n"
        "child.stdout.readline()\n"  # the stand-in runs, in its own session, and sleeps
        "print(child.pid, launcher._proc.pid, flush=True)\n"
        "time.sleep(600)\n")
    autotune = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[3])
    server, launcher = (int(x) for x in autotune.stdout.readline().split())
    assert session_pids(server)
    autotune.kill()
    autotune.wait()
    deadline = time.monotonic() + 10
    # Gone or a zombie (session_pids skips zombies): this container's init reaps orphans only
    # every second or two, which the test need not wait for.
    while (session_pids(server) or session_pids(launcher)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not session_pids(server) and not session_pids(launcher)


def test_a_launcher_that_dies_mid_deployment_takes_its_server_along_and_says_so_once(launcher, tmp_path):
    child = spawn(launcher, tmp_path, "sleep")
    first_line(child)
    launcher._proc.kill()
    assert child.wait(timeout=10) == -signal.SIGTERM  # died with it (PR_SET_PDEATHSIG)
    assert launcher.failures == ["its process ended"]
    assert launcher.spawn(["exit", "0"], dict(os.environ), str(tmp_path)) is None  # a new process then


# vLLM's entry points as each supported version lays them out: 0.26 has no ``launchers``
# package; 0.32 serves from ``launchers/api_server/entry`` and keeps ``openai/api_server``.
LAYOUTS = {
    "0.26": ("entrypoints/openai/api_server.py", "entrypoints/cli/main.py", "entrypoints/cli/serve.py"),
    "0.32": ("entrypoints/openai/api_server.py", "entrypoints/cli/main.py", "entrypoints/cli/serve.py",
             "entrypoints/launchers/api_server/entry.py"),
}
MAIN = ('import json, sys\nif __name__ == "__main__":\n'
        '    print(json.dumps({"args": sys.argv[1:], "preimported": sorted(m for m in sys.modules'
        ' if m.startswith("vllm."))}), flush=True)\n')


def stand_in_vllm(root: Path, files: tuple[str, ...], *, broken: str = "") -> dict[str, str]:
    """A package tree named ``vllm`` with these modules (no vLLM code); ``broken`` names one
    whose own import fails. The environment that puts it first on the path."""
    for rel in files:
        path = root / "vllm" / rel
        for parent in [*path.relative_to(root).parents][:-1]:
            (root / parent).mkdir(parents=True, exist_ok=True)
            (root / parent / "__init__.py").touch()
        path.write_text(("import no_such_dependency\n" if rel == broken else "") + MAIN)
    return {**os.environ, "PYTHONPATH": str(root)}


@pytest.mark.parametrize("version", LAYOUTS)
@pytest.mark.parametrize("module", ["vllm.entrypoints.cli.main", "vllm.entrypoints.openai.api_server"])
def test_the_launcher_serves_each_supported_vllm_layout_and_skips_only_absent_modules(
        tmp_path, version, module):
    env = stand_in_vllm(tmp_path, LAYOUTS[version])
    failures: list[str] = []
    skipped: list[tuple[str, ...]] = []
    with Preimported(sys.executable, module, env, on_failure=failures.append,
                     on_skipped=skipped.append) as launcher:
        child = launcher.spawn(["serve", "m"], env, str(tmp_path))
        assert child is not None, launcher.failed
        seen = first_line(child)
        assert child.wait(timeout=10) == 0
    assert not failures and seen["args"] == ["serve", "m"]
    absent = [] if version == "0.32" else ["vllm.entrypoints.launchers.api_server.entry"]
    assert skipped == ([tuple(absent)] if absent else [])  # said once, or not at all
    assert module in seen["preimported"]
    assert ("vllm.entrypoints.launchers.api_server.entry" in seen["preimported"]) == (version == "0.32")


def test_an_optional_module_that_is_present_but_fails_to_import_makes_the_launcher_unusable(tmp_path):
    """Absent is skipped; present and broken (a missing dependency of its own) is a failure."""
    env = stand_in_vllm(tmp_path, LAYOUTS["0.32"], broken="entrypoints/launchers/api_server/entry.py")
    failures: list[str] = []
    with Preimported(sys.executable, "vllm.entrypoints.cli.main", env, on_failure=failures.append) as launcher:
        assert launcher.spawn(["serve", "m"], env, str(tmp_path)) is None
    assert len(failures) == 1 and "no_such_dependency" in failures[0]
