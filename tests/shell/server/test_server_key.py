"""A deployment's API key (shell.server.server, shell.server.key_config): it reaches vLLM only through a
private ``--config`` file (mode 0600, gone at teardown), never argv or the environment (vLLM
0.26 hashes VLLM_* variables into its compile-cache key), and the log shows ``***`` where a
vLLM that logs its arguments would print it. Real child processes stand in for vLLM."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from autotune.errors import ConfigError
from autotune.shell.server.install import Entrypoint
from autotune.shell.server.key_config import remove_key_config, remove_orphaned_key_configs, write_key_config
from autotune.shell.server.server import DeploymentSpec, LogPipe, ServerProcess

KEY = "at-0123456789abcdefghijklmnopqrstuv"

# Prints the key the way vLLM 0.26 logs its non-default arguments, cut mid-key between two
# flushed writes, then once more at the end of output without a newline.
PRINTS_THE_KEY = rf"""
import sys, time
out = sys.stdout.buffer
out.write(b"INFO non-default args: {{'api_key': ['{KEY[:10]}"); out.flush()
time.sleep(0.3)
out.write(b"{KEY[10:]}'], 'port': 8000}}\rprogress {KEY}\n"); out.flush()
out.write(b"last words {KEY}"); out.flush()
"""


def test_the_log_and_the_stamped_lines_hold_stars_where_the_child_printed_the_key(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", PRINTS_THE_KEY], stdout=subprocess.PIPE)
    pipe = LogPipe(proc.stdout, tmp_path / "server.log", time.monotonic(), secret=KEY)
    proc.wait(10)
    pipe.close()
    assert (tmp_path / "server.log").read_bytes() == (
        b"INFO non-default args: {'api_key': ['***'], 'port': 8000}\rprogress ***\nlast words ***")
    assert [line.text for line in pipe.lines] == [
        "INFO non-default args: {'api_key': ['***'], 'port': 8000}", "progress ***", "last words ***"]


# Stands in for vLLM: reads the key from the file its --config names, logs it (as vLLM 0.26
# does), then serves nothing until it is killed.
READS_ITS_CONFIG = r"""
import sys, time, yaml
path = sys.argv[sys.argv.index("--config") + 1]
print("non-default args:", yaml.safe_load(open(path)), flush=True)
time.sleep(600)
"""


def environ_of(pid: int) -> dict[str, str]:
    words = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(w.decode().split("=", 1) for w in words if b"=" in w)


def test_the_key_travels_in_a_private_file_that_teardown_removes_not_in_argv_or_environment(
        tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "inherited-key")  # a user's own key is not passed on
    spec = DeploymentSpec("m", entrypoint=Entrypoint((sys.executable, "-c", READS_ITS_CONFIG), True),
                          log_path=tmp_path / "server.log", grace_s=2)
    server = ServerProcess(spec)
    server.start()
    try:
        path = server.key_config
        assert path is not None and not path.is_relative_to(tmp_path)  # not in the artifacts
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert yaml.safe_load(path.read_text()) == {"api-key": server.api_key}
        assert server.argv[-2:] == ["--config", str(path)]
        assert server.api_key not in " ".join(server.argv)
        env = environ_of(server.pid)
        assert "VLLM_API_KEY" not in env and server.api_key not in "".join(env.values())
        deadline = time.monotonic() + 30
        while "non-default args" not in server.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.log_text() == "non-default args: {'api-key': '***'}\n"
    finally:
        server.stop()
    assert not path.exists() and not path.parent.exists() and server.key_config is None


def test_the_users_own_config_file_is_merged_with_the_key_and_left_as_it_was(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("max-num-seqs: 8\nenforce-eager: true\n")
    for given in (["--config", str(mine)], [f"--config={mine}"]):
        path, options = write_key_config(KEY, ["-tp", "2", *given, "--port", "1"])
        try:
            assert options == ["-tp", "2", "--port", "1", "--config", str(path)]
            assert yaml.safe_load(path.read_text()) == {
                "max-num-seqs": 8, "enforce-eager": True, "api-key": KEY}
        finally:
            remove_key_config(path)
        assert not path.parent.exists()
    assert mine.read_text() == "max-num-seqs: 8\nenforce-eager: true\n"


@pytest.mark.parametrize(("options", "config", "says"), [
    (["--api-key", "mine"], None, "vLLM flag --api-key: autotune gives each deployment its own"),
    (["--api_key=mine"], None, "vLLM flag --api-key: autotune gives each deployment its own"),
    (None, "api-key: mine\n", "field 'api-key': autotune gives each deployment its own"),
    (None, "- a list\n", "expected a mapping of flag: value, found list"),
], ids=["flag", "flag-underscore", "config-field", "config-not-a-mapping"])
def test_a_key_of_the_users_own_or_an_unreadable_config_is_refused_in_one_line(
        tmp_path, options, config, says):
    if config is not None:
        (tmp_path / "mine.yaml").write_text(config)
        options = ["--config", str(tmp_path / "mine.yaml")]
    before = set(Path(tempfile.gettempdir()).glob("autotune-key-*"))
    with pytest.raises(ConfigError, match=says) as info:
        write_key_config(KEY, options)
    assert "\n" not in str(info.value)
    assert set(Path(tempfile.gettempdir()).glob("autotune-key-*")) == before


def test_a_key_folder_whose_process_was_killed_is_swept_by_the_next_deployment(tmp_path):
    # A process killed before its teardown (SIGKILL) leaves its folder; the pid says whose, the
    # age keeps a folder of a live process in another pid namespace sharing /tmp.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f"autotune-key-{dead.pid}-abc"
    recent = tmp_path / f"autotune-key-{dead.pid}-new"  # its process gone, but within the hour
    alive = tmp_path / f"autotune-key-{os.getpid()}-def"
    old_format = tmp_path / "autotune-key-q2_lwyvw"  # before the pid was in the name
    for folder in (orphan, recent, alive, old_format):
        folder.mkdir()
        (folder / "vllm-config.yaml").write_text("api-key: at-dead\n")
    two_hours_ago = time.time() - 7200
    for folder in (orphan, alive, old_format):
        os.utime(folder, (two_hours_ago, two_hours_ago))
    assert sorted(remove_orphaned_key_configs(tmp_path)) == sorted([orphan, old_format])
    assert recent.exists() and alive.exists() and not orphan.exists() and not old_format.exists()
