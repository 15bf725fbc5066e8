"""CUDA graph capture sized to the study's load (core.deployment.graph_cap): the cap is the
highest concurrency x (1 + the most speculative tokens the space can draw), and it rides on
every deployment as a fixed flag."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.core.deployment.flags import to_argv
from autotune.core.deployment.graph_cap import CAP_FLAG, capped, graph_capture_cap, speculative_tokens
from autotune.core.space.search_space import ModelContext
from autotune.core.workload.profiles import get_profile
from autotune.errors import ConfigError
from autotune.shell.bench.files import read_space
from tests.helpers import SPACES

PAIR = (get_profile("low-concurrency"), get_profile("high-concurrency"))  # concurrency 2 and 100


def test_the_cap_is_the_highest_concurrency_times_one_plus_the_most_speculative_tokens():
    reference, extended = read_space(SPACES / "reference.yaml"), read_space(SPACES / "extended.yaml")
    assert speculative_tokens(reference) == 1  # mtp on: one token
    assert speculative_tokens(extended) == 4  # num_speculative_tokens drawn up to 4
    assert graph_capture_cap(PAIR, reference) == 200
    assert graph_capture_cap(PAIR, extended) == 500
    assert graph_capture_cap(PAIR[:1], dataclasses.replace(reference, parameters=())) == 2


def test_a_capacity_search_caps_at_its_highest_concurrency_and_a_rate_search_cannot_be_capped():
    reference = read_space(SPACES / "reference.yaml")
    capacity = get_profile("capacity")
    assert graph_capture_cap((capacity,), reference) == int(capacity.load) * 2
    by_rate = dataclasses.replace(capacity, capacity=dataclasses.replace(capacity.capacity, load="rate"))
    with pytest.raises(ConfigError, match="--cap-cuda-graphs: profile 'capacity' sets no highest"):
        graph_capture_cap((by_rate,), reference)


def test_every_configuration_of_a_capped_space_carries_the_cap(moe_mtp_info):
    space = capped(read_space(SPACES / "reference.yaml"), 200)
    ctx = ModelContext(moe_mtp_info, 4096)
    for params in ({}, {"mtp": True}):
        argv = to_argv(space, ctx, params)
        assert argv[argv.index(CAP_FLAG) + 1] == "200"
    with pytest.raises(ConfigError, match="sets --max-cudagraph-capture-size itself"):
        capped(space, 100)


def test_the_switch_is_stored_with_the_study_and_a_worker_rebuilds_the_capped_space(tmp_path):
    import optuna

    from autotune.study.run.study_plan import build_plan, store_plan, stored_request
    from tests.helpers import request_in

    plan = build_plan(request_in(tmp_path, cap_cuda_graphs=True))
    assert plan.space.deployment.flags[CAP_FLAG] == 100  # high-concurrency, no speculation
    study = optuna.create_study(study_name="p")
    store_plan(study, plan)
    again = build_plan(stored_request(study, storage="sqlite://", workdir=tmp_path, model=None, trials=None))
    assert again.space.deployment == plan.space.deployment
    assert CAP_FLAG not in build_plan(request_in(tmp_path)).space.deployment.flags  # off by default
    with pytest.raises(ConfigError, match="cap_cuda_graphs"):  # one study, one setting
        store_plan(study, build_plan(request_in(tmp_path)))
