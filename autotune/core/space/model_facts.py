"""What autotune needs to know about a model, from its parsed config.json. Pure.

Finding and reading that file (a local folder or the local Hugging Face cache) is
``shell.bench.files.read_model_info``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
