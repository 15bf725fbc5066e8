"""A demo model whose MTP head predicts: trained on a predictable language, served for real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.core.workload.profiles import ProfileOverrides, get_profile
from autotune.core.workload.requests import RandomPrompts
from autotune.modelgen.predictable import successor_map
from autotune.shell.bench.client import Target, run_profile
from autotune.shell.server.server import DeploymentSpec, ServerProcess
from tests.helpers import cpu_slot


@pytest.mark.vllm
def test_the_successor_map_is_a_seeded_permutation_of_the_ordinary_ids():
    f = successor_map(512, seed=0)
    assert sorted(f[3:]) == list(range(3, 512)) and f[:3] == [0, 1, 2]
    assert f == successor_map(512, seed=0) and f != successor_map(512, seed=1)


@pytest.mark.slow
def test_training_reaches_near_perfect_accuracy_for_base_model_and_mtp_head(trained_model):
    report = json.loads((Path(trained_model) / "training.json").read_text())
    assert report["base_accuracy"] >= 0.98 and report["mtp_accuracy"] >= 0.98


@pytest.mark.slow
def test_mtp_speculation_on_the_trained_model_is_mostly_accepted(trained_model, tmp_path):
    spec = DeploymentSpec(
        model=trained_model, slot=cpu_slot(2), log_path=tmp_path / "server.log",
        options=("--tensor-parallel-size", "2", "--max-model-len", "4096", "--speculative-config",
                 '{"method":"mtp","num_speculative_tokens":1}'),
    )
    profile = get_profile("low-concurrency", ProfileOverrides(num_prompts=8, input_len=128,
                                                              output_len=64))
    with ServerProcess(spec) as dep:
        run = run_profile(Target(dep.url, dep.model_name, dep.api_key), profile, seed=0,
                          source=RandomPrompts(512))
    assert run.summary.valid
    assert run.summary.server.get("spec_decode_acceptance_rate", 0.0) > 80.0, run.summary.server
