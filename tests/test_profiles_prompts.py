"""Workload profiles and prompt generation."""

import pytest

from autotune.core.workload.profiles import ProfileOverrides, get_profile
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
