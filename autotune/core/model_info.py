"""What autotune needs to know about a model, read from its config.json. No network.

A model is a local folder or a Hugging Face id already in the local cache.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

_MOE_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


@dataclass(frozen=True)
class ModelInfo:
    """Facts from config.json that decide which parameters apply."""

    name: str  # what vLLM is given: a folder path or a hub id
    architecture: str
    is_moe: bool
    num_experts: int
    mtp_layers: int
    native_context: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int
    rope_parameters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_mtp(self) -> bool:
        return self.mtp_layers > 0


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


def parse_config(name: str, config: dict) -> ModelInfo:
    """ModelInfo from a parsed config.json (text models; a nested text_config is used)."""
    text = config.get("text_config") or config
    experts = next((int(text[k]) for k in _MOE_KEYS if text.get(k)), 0)
    mtp = next((int(text[k]) for k in _MTP_KEYS if text.get(k)), 0)
    rope = text.get("rope_scaling") or text.get("rope_parameters") or {}
    native = rope.get("original_max_position_embeddings") if isinstance(rope, dict) else None
    heads = int(text.get("num_attention_heads", 0))
    return ModelInfo(
        name=name,
        architecture=(config.get("architectures") or ["unknown"])[0],
        is_moe=experts > 0,
        num_experts=experts,
        mtp_layers=mtp,
        native_context=int(native or text.get("max_position_embeddings", 0)),
        num_attention_heads=heads,
        num_kv_heads=int(text.get("num_key_value_heads", heads)),
        vocab_size=int(text.get("vocab_size", 0)),
        rope_parameters=rope if isinstance(rope, dict) else {},
    )


def load_model_info(model: str) -> ModelInfo:
    """Read and parse the config.json of ``model``."""
    path = find_config(model)
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read model config: {exc}") from exc
    return parse_config(model, config)
