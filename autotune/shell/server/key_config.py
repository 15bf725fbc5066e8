"""The API key's private vLLM config file (YAML for ``--config``, merged with the user's own
``--config`` if any), mode 0600 in a private folder; it must put the key nowhere else: not
argv, not the environment (vLLM 0.26 hashes VLLM_API_KEY into its compile-cache key)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from autotune.errors import ConfigError

KEY_SETTING = "api-key"
_PREFIX = "autotune-key-"  # then the writing process's pid: a folder outliving it is swept
STALE_S = 3600.0  # a key folder younger than this is never swept
_API_KEY_FLAG = re.compile(r"^--api[-_]key(=|$)")


def _user_config(options: Sequence[str]) -> tuple[list[str], Path | None]:
    """The options without the user's ``--config PATH`` (or ``--config=PATH``), and that path."""
    rest, path = list(options), None
    for i, word in enumerate(rest):
        if word == "--config" and i + 1 < len(rest):
            path = Path(rest[i + 1])
            del rest[i:i + 2]
            break
        if word.startswith("--config="):
            path = Path(word.split("=", 1)[1])
            del rest[i]
            break
    return rest, path


def _read_user_config(path: Path) -> dict:
    try:
        settings = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"vLLM flag --config {path}: cannot read it as YAML ({exc})") from exc
    if not isinstance(settings, dict):
        raise ConfigError(f"vLLM flag --config {path}: expected a mapping of flag: value, "
                          f"found {type(settings).__name__}")
    if {KEY_SETTING, "api_key"} & set(settings):
        raise ConfigError(f"{path}: field '{KEY_SETTING}': autotune gives each deployment its "
                          "own API key; remove the field")
    return settings


def write_key_config(api_key: str, options: Sequence[str]) -> tuple[Path, list[str]]:
    """Write ``api-key`` (with the settings of the user's ``--config``, since vLLM reads one)
    to a new file only this user can read; returns it and the options naming it instead."""
    if any(_API_KEY_FLAG.match(word) for word in options):
        raise ConfigError("vLLM flag --api-key: autotune gives each deployment its own API key; "
                          "remove the flag")
    rest, user_file = _user_config(options)
    settings = _read_user_config(user_file) if user_file is not None else {}
    remove_orphaned_key_configs()
    folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))  # mode 0700
    path = folder / "vllm-config.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        yaml.safe_dump({**settings, KEY_SETTING: api_key}, file)
    return path, [*rest, "--config", str(path)]


def remove_key_config(path: Path) -> None:
    """Delete the file and its private folder; idempotent."""
    shutil.rmtree(path.parent, ignore_errors=True)


def remove_orphaned_key_configs(root: Path | None = None, *, now: float | None = None) -> list[Path]:
    """Delete this user's key folders left by an autotune process killed before its teardown
    (SIGKILL, a machine's OOM killer); returns them. A folder goes only when it is older than
    ``STALE_S`` (a live deployment's folder is removed once its server is ready, within its
    start-up timeout) and its name holds no pid alive here, or none at all (older versions of
    autotune): the age keeps a live folder of a process in another pid namespace sharing this
    temporary folder."""
    now = time.time() if now is None else now
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        pid = folder.name[len(_PREFIX):].split("-", 1)[0]
        try:
            info = folder.stat()
            if info.st_uid != os.getuid() or now - info.st_mtime < STALE_S:
                continue
            if pid.isdigit() and "-" in folder.name[len(_PREFIX):]:
                os.kill(int(pid), 0)
                continue  # its process lives
        except ProcessLookupError:
            pass
        except OSError:  # gone meanwhile, or another user's process: not ours to judge
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed
