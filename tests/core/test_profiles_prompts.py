"""Workload profiles and prompt generation: the built-in profiles send random text as vLLM's
random dataset does, and token ids where a profile says ``token_ids: true``."""

import dataclasses
import json
import re

import pytest

from autotune.core.workload.profiles import ProfileOverrides, get_profile, profiles_of
from autotune.core.workload.requests import random_prompts
from autotune.errors import ConfigError


def test_builtin_profiles_are_the_reference_studys():
    low, high = get_profile("low-concurrency"), get_profile("high-concurrency")
    assert (low.input_len, low.output_len, low.num_prompts, low.max_concurrency) == (512, 256, 100, 2)
    assert high.max_concurrency == 100 and high.temperature == 0.0


def test_overrides_shrink_a_profile():
    p = get_profile("high-concurrency", ProfileOverrides(num_prompts=8, output_len=16))
    assert (p.num_prompts, p.output_len, p.max_concurrency) == (8, 16, 100)


def test_unknown_profile_and_bad_override_are_one_line_errors():
    with pytest.raises(ConfigError, match="unknown profile; valid: low-concurrency, high-concurrency"):
        get_profile("medium")
    with pytest.raises(ConfigError, match="num_prompts must be >= 1"):
        get_profile("low-concurrency", ProfileOverrides(num_prompts=0))


def test_the_load_flags_change_only_a_capacity_profile_and_a_rate_gets_its_own_range():
    low, capacity = profiles_of(["low-concurrency", "capacity"], load="rate")
    assert low == get_profile("low-concurrency")
    assert (capacity.capacity.load, capacity.capacity.low, capacity.capacity.high) == ("rate", 0.25, 64.0)
    [narrowed] = profiles_of(["capacity"], load_range="2,32")
    assert (narrowed.capacity.load, narrowed.capacity.low, narrowed.capacity.high) == ("concurrency", 2, 32)
    with pytest.raises(ConfigError, match="--load-range '2-32': expected LOW,HIGH, e.g. 1,64"):
        profiles_of(["capacity"], load_range="2-32")
    with pytest.raises(ConfigError, match="--load concurrency --load-range 32,2: capacity: need 0 < low"):
        profiles_of(["capacity"], load_range="32,2")


def test_prompts_have_exact_length_skip_special_ids_and_depend_on_seed():
    a = random_prompts(vocab_size=512, input_len=64, count=5, seed=1)
    assert [len(p) for p in a] == [64] * 5
    assert min(min(p) for p in a) >= 3 and max(max(p) for p in a) < 512
    assert a == random_prompts(vocab_size=512, input_len=64, count=5, seed=1)
    assert a != random_prompts(vocab_size=512, input_len=64, count=5, seed=2)


def test_the_warm_up_is_at_least_one_wave_at_the_profiles_concurrency():
    assert get_profile("low-concurrency").warmups == 2
    assert get_profile("high-concurrency").warmups == 100  # 4 asked; one wave of 100
    assert get_profile("high-concurrency", ProfileOverrides(num_prompts=8)).warmups == 8


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from autotune.modelgen.checkpoints import write_tokenizer
    from autotune.shell.bench.workloads import load_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer(folder, 512)
    return load_tokenizer(str(folder))


def sources(profiles, tokenizer):
    from autotune.shell.bench.workloads import sources_for

    return sources_for(profiles, vocab_size=512, tokenizer=tokenizer, max_model_len=4096)


@pytest.mark.parametrize("name", ["low-concurrency", "high-concurrency"])
@pytest.mark.vllm
def test_the_builtin_profiles_send_text_made_as_a_random_data_profile_makes_it(tokenizer, name):
    from autotune.core.workload.profiles import DatasetSpec

    profile = get_profile(name, ProfileOverrides(num_prompts=4, input_len=64, output_len=8))
    assert profile.dataset is None and profile.token_ids is False
    as_data = dataclasses.replace(profile, name="data", dataset=DatasetSpec("random"))
    _, made = sources((profile, as_data), tokenizer)
    builtin, data = (made[p].requests(profile, 4, seed=3) for p in (name, "data"))
    assert builtin == data  # vLLM's random dataset: text the server tokenizes
    assert all(isinstance(r.prompt, str) and r.prompt_len == 64 for r in builtin)
    assert len(tokenizer.encode(builtin[0].prompt, add_special_tokens=False)) == 64


def test_token_ids_true_keeps_random_token_ids_and_needs_no_tokenizer():
    from autotune.core.workload.profiles import parse_profiles

    profile = parse_profiles("old-table: {token_ids: true, input_len: 32}", "f.yaml")["old-table"]
    _, made = sources((profile,), tokenizer=None)
    [request] = made["old-table"].requests(profile, 1, seed=0)
    assert isinstance(request.prompt, tuple) and len(request.prompt) == request.prompt_len == 32
    assert get_profile("low-concurrency", ProfileOverrides(token_ids=True)).token_ids is True


def test_text_without_a_tokenizer_is_one_line_that_names_both_ways_out():
    with pytest.raises(ConfigError) as err:
        sources((get_profile("low-concurrency"),), tokenizer=None)
    assert str(err.value) == (
        "profile 'low-concurrency' sends random text, which needs the model's tokenizer: give "
        "--model a local model folder (or --tokenizer to `bench`), or send token ids instead "
        "(--token-ids, or token_ids: true in a profile file)")


@pytest.mark.parametrize("text, message", [
    ("p: {token_ids: yes please}", "profile 'p': token_ids must be true or false, got 'yes please'"),
    ("p: {token_ids: true, dataset: {format: random}}",
     "profile 'p': token_ids is for a profile without a dataset; a dataset sets its own"),
], ids=["not-a-bool", "with-a-dataset"])
def test_a_bad_token_ids_is_one_line_naming_the_profile(text, message):
    from autotune.core.workload.profiles import parse_profiles

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_profiles(text, "f.yaml")


def test_a_resumed_study_keeps_what_it_was_created_sending():
    from autotune.core.plan.study_request import StudyRequest

    ids = dataclasses.replace(get_profile("low-concurrency"), token_ids=True)
    for profile in (get_profile("low-concurrency"), ids):  # the profile is stored with its fields
        stored = json.loads(json.dumps(StudyRequest(profiles=(profile,), model="/m").to_dict()))
        assert StudyRequest.from_dict(stored, "study 's'").profiles == (profile,)
    created = StudyRequest(profiles=(ids,), model="/m")
    assert created.differences(StudyRequest(profiles=(get_profile("low-concurrency"),), model="/m")
                               ) == ["profiles"]  # a `run` that sends text may not join it
    # A study stored before text was the default (layout 1) sent token ids: it still does.
    old = {"version": 1, "model": "/m", "space_yaml": "x",
           "profiles": [{k: v for k, v in get_profile("low-concurrency").to_dict().items()
                         if k != "token_ids"}]}
    assert StudyRequest.from_dict(old, "study 'old'").profiles == (ids,)
