"""Reading the user's files: search spaces, reference configs, model configs, exported flags. The core parses
the text; this module finds and reads it, and turns a missing or unreadable file into a
one-line error naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from autotune.core.space.model_facts import ModelInfo, parse_config
from autotune.core.space.search_space import ReferenceSet, SearchSpace
from autotune.core.space.space_yaml import parse_references, parse_space
from autotune.core.workload.profiles import WorkloadProfile, parse_profiles
from autotune.errors import ConfigError, SpaceError

PACKAGE_ROOT = Path(__file__).resolve().parents[3]  # the source tree: autotune/shell/bench/ up


def locate_shipped(relative: str) -> str:
    """A shipped file (``search_spaces/...``): from the working directory, else from the
    source tree autotune runs from."""
    if Path(relative).exists():
        return relative
    candidate = PACKAGE_ROOT / relative
    return str(candidate) if candidate.exists() else relative


def read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise SpaceError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def read_space(path: str | Path) -> SearchSpace:
    """A search-space YAML file, validated; SpaceError naming file and field."""
    return parse_space(read_text(path), str(path))


def read_profiles(path: str | Path) -> dict[str, WorkloadProfile]:
    """A profile file (``--profile-file``): named workloads, as the built-in ones are defined;
    dataset paths are relative to the file."""
    from autotune.shell.bench.workloads import with_absolute_paths

    return with_absolute_paths(parse_profiles(read_text(path), str(path)), Path(path).parent)


def read_references(path: str | Path, space: SearchSpace) -> ReferenceSet:
    return parse_references(read_text(path), str(path), space)


def _hf_cache_config(model_id: str) -> Path | None:
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub"
    )
    snapshots = Path(hub) / ("models--" + model_id.replace("/", "--")) / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def find_config(model: str) -> Path:
    """config.json of a local model folder or of a hub id in the local cache."""
    local = Path(model) / "config.json"
    if local.is_file():
        return local
    cached = _hf_cache_config(model)
    if cached is not None:
        return cached
    raise ConfigError(
        f"--model {model!r}: no config.json found (not a model folder, and not in the local "
        "Hugging Face cache); give a folder such as one made by 'autotune make-model'"
    )


def read_model_info(model: str) -> ModelInfo:
    """Find, read and parse the config.json of ``model``."""
    path = find_config(model)
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read model config: {exc}") from exc
    return parse_config(model, config)

