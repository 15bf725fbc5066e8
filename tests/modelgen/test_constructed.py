"""Constructed models (``modelgen.constructed``): weights set, not trained, so that greedy decoding
follows the synthetic language exactly and the MTP head is right for a chosen share of tokens.
Verified at small size on vLLM's CPU build: the completion follows the language and the
measured MTP acceptance matches the chosen rate."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from autotune.core.deployment.slots import Slot
from autotune.core.workload.profiles import ProfileOverrides, get_profile
from autotune.core.workload.requests import RandomPrompts
from autotune.errors import ConfigError
from autotune.modelgen.constructed import make_constructed, mtp_map
from autotune.modelgen.predictable import successor_map
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.server.server import DeploymentSpec, ServerProcess

CHOSEN = 0.5


@pytest.mark.vllm
def test_the_mtp_map_is_right_for_the_chosen_share_and_wrong_elsewhere():
    for p in (0.0, 0.4, 0.8, 1.0):
        g = mtp_map(6144, p, seed=0)
        right = sum(g[y] == y for y in range(3, 6144)) / 6141
        assert abs(right - p) < 1e-3
        assert sorted(g) == list(range(6144))  # a permutation: every wrong draft names a token


@pytest.mark.vllm
def test_a_second_model_links_the_base_of_the_first_and_differs_only_in_its_mtp_layer(tmp_path):
    a = make_constructed(tmp_path / "a", shape="tiny", mtp_acceptance=0.8)
    b = make_constructed(tmp_path / "b", shape="tiny", mtp_acceptance=0.3, reuse_base=a.name)
    for shard in ("embed-head.safetensors", "layer-000.safetensors"):
        assert (tmp_path / "a" / shard).stat().st_ino == (tmp_path / "b" / shard).stat().st_ino
    index = json.loads((tmp_path / "b" / "model.safetensors.index.json").read_text())["weight_map"]
    assert index["model.layers.2.eh_proj.weight"] == "mtp.safetensors" and b.mtp_layers == 1
    made = json.loads((tmp_path / "b" / "constructed.json").read_text())
    assert made["mtp_right_share"] == pytest.approx(0.3, abs=0.01)
    with pytest.raises(ConfigError, match="--reuse-base .*: not a constructed 'tiny' model of seed 1"):
        make_constructed(tmp_path / "c", shape="tiny", mtp_acceptance=0.5, seed=1, reuse_base=a.name)


@pytest.fixture(scope="module")
def constructed_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("constructed")
    info = make_constructed(root / "model", shape="tiny", mtp_acceptance=CHOSEN)
    spec = DeploymentSpec(
        model=info.name, slot=Slot("cpu", (0,), 1), log_path=root / "server.log",
        options=("--tensor-parallel-size", "1", "--max-model-len", "2048", "--speculative-config",
                 '{"method":"mtp","num_speculative_tokens":1}'),
    )
    with ServerProcess(spec) as dep:
        yield dep, info


@pytest.mark.slow
def test_vllm_serves_it_and_greedy_decoding_follows_the_language(constructed_server):
    dep, info = constructed_server
    f = successor_map(info.vocab_size, seed=0)
    prompt = [17, 99, 201, 45]

    async def complete() -> dict:
        async with aiohttp.ClientSession() as s:
            async with s.post(dep.url + "/v1/completions", headers={"Authorization": f"Bearer {dep.api_key}"},
                              json={"model": dep.model_name, "prompt": prompt, "max_tokens": 40,
                                    "temperature": 0, "ignore_eos": True}) as r:
                return await r.json()

    text = asyncio.run(complete())["choices"][0]["text"]
    ids = [int(w[1:]) for w in text.split()]
    expected = [f[prompt[-1]]]
    while len(expected) < 40:
        expected.append(f[expected[-1]])
    assert ids == expected


@pytest.mark.slow
def test_measured_mtp_acceptance_matches_the_chosen_rate(constructed_server):
    dep, info = constructed_server
    profile = get_profile("low-concurrency", ProfileOverrides(num_prompts=16, input_len=64,
                                                              output_len=64))
    run = run_profile(Target(dep.url, dep.model_name, dep.api_key), profile, seed=3,
                      source=RandomPrompts(info.vocab_size))
    assert run.summary.valid and "spec_decode_acceptance_rate" in run.summary.server
    # 16 x 64 tokens along random walks of f: the share of "right" tokens visited varies a little.
    assert abs(run.summary.server["spec_decode_acceptance_rate"] / 100 - CHOSEN) < 0.12, run.summary.server
