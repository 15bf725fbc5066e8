"""Shared fixtures. Real vLLM servers are session-scoped: start-up is the expensive part."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.core.model_info import ModelInfo, parse_config

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
    from autotune.shell.modelgen import make_model

    return make_model(models_dir / "dense", kind="dense", seed=0).name


@pytest.fixture(scope="session")
def moe_model(models_dir) -> str:
    from autotune.shell.modelgen import make_model

    return make_model(models_dir / "moe-mtp", kind="moe", mtp=True, seed=0).name


def cpu_slot(tp: int = 2):
    from autotune.core.slots import make_slots

    cores = sorted(os.sched_getaffinity(0))
    return make_slots("cpu", cores, tp, per_rank=max(1, len(cores) // tp))[0]


@pytest.fixture(scope="session")
def dense_server(dense_model, tmp_path_factory):
    """One real TP=2 vLLM server on the tiny dense model, shared by the tests that only read."""
    from autotune.shell.server import Deployment, DeploymentSpec

    log = tmp_path_factory.mktemp("dense-server") / "server.log"
    spec = DeploymentSpec(
        model=dense_model, options=("--tensor-parallel-size", "2", "--max-model-len", "4096"),
        slot=cpu_slot(2), log_path=log, startup_timeout_s=600,
    )
    with Deployment(spec) as dep:
        yield dep
