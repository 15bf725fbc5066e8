"""The server's output read through a pipe (shell.server.server.LogPipe): the log file gets every
byte as it arrives, each line keeps its arrival, and readiness is signalled by the API
server's line. A real child process writes the output."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from autotune.shell.server.server import LogPipe

CHILD = r"""
import sys, time
out = sys.stdout.buffer
out.write(b"(APIServer pid=1) INFO 12-04 10:00:00 [api_utils.py] banner\n"); out.flush()
time.sleep(0.3)
out.write(b"Loading shards:   0%|\rLoading shards: 100%|\n"); out.flush()
time.sleep(0.3)
out.write(b"INFO:     Application startup complete.\n"); out.flush()
time.sleep(0.3)
out.write(b"INFO:     127.0.0.1 - GET /health 200\n"); out.flush()
"""


def test_each_line_is_stamped_on_arrival_and_the_file_holds_the_output_verbatim(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE)
    pipe = LogPipe(proc.stdout, tmp_path / "server.log", t0)
    assert pipe.listening.wait(10)
    heard_s = time.monotonic() - t0
    pipe.stamping = False  # ready: later lines go to the file only
    proc.wait(10)
    pipe.close()
    assert (tmp_path / "server.log").read_bytes().count(b"\r") == 1
    assert b"GET /health" in (tmp_path / "server.log").read_bytes()
    texts = [x.text for x in pipe.lines]
    assert texts == ["(APIServer pid=1) INFO 12-04 10:00:00 [api_utils.py] banner",
                     "Loading shards:   0%|", "Loading shards: 100%|",
                     "INFO:     Application startup complete."]
    stamps = [x.arrival_s for x in pipe.lines]
    assert stamps[1] - stamps[0] > 0.25 and stamps[3] - stamps[1] > 0.25  # not whole seconds
    assert stamps[3] <= heard_s


def test_the_readiness_wait_wakes_when_the_output_ends_not_at_its_next_poll(tmp_path):
    """A server that dies before it listens is noticed when its output ends: a poll of 30 s
    is not waited out."""
    from autotune.errors import DeploymentError
    from autotune.shell.server.install import Entrypoint
    from autotune.shell.server.server import DeploymentSpec, ServerProcess

    spec = DeploymentSpec("m", entrypoint=Entrypoint((sys.executable, "-c", "print('dying')"), True),
                          log_path=tmp_path / "server.log", startup_timeout_s=60)
    server = ServerProcess(spec)
    server.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(DeploymentError, match="exited with 0"):
            server.wait_ready(poll_s=30)
    finally:
        server.stop()
    assert time.monotonic() - t0 < 10


def test_a_server_that_dies_at_start_is_diagnosed_from_its_whole_output(tmp_path):
    """A real process stands in for vLLM: it writes a traceback in two bursts and exits 1. The
    diagnosis reads the log only once the reader has written its last line."""

    from autotune.core.deployment import failures
    from autotune.errors import DeploymentError
    from autotune.shell.server.install import Entrypoint
    from autotune.shell.server.server import DeploymentSpec, ServerProcess

    dying = ("import sys, time; print('Traceback (most recent call last):', flush=True); "
             "time.sleep(0.3); print('ValueError: max_num_seqs must be positive', flush=True); "
             "sys.exit(1)")
    spec = DeploymentSpec("m", entrypoint=Entrypoint((sys.executable, "-c", dying), True),
                          log_path=tmp_path / "server.log", startup_timeout_s=30)
    with pytest.raises(DeploymentError) as caught:
        with ServerProcess(spec):
            pass
    assert caught.value.failure is failures.STARTUP_CRASH
    assert "ValueError: max_num_seqs must be positive" in caught.value.log_tail


@pytest.mark.slow
def test_a_real_start_names_nine_tenths_of_its_ready_time(dense_server):
    phases = dense_server.phases()
    assert phases is not None and phases.unnamed_s < 0.1 * dense_server.startup_s, phases
    assert phases.imports_s > 0 and phases.weights_s > 0 and phases.api_server_s > 0
    lines = dense_server.startup_lines()
    assert lines and lines[-1].arrival_s <= dense_server.startup_s
