"""Workloads from data: each format's records, sampling, and bad data caught before any
deployment with one line naming the file, the line and the field. The tokenizer is a real one
(the generated models' word-level tokenizer)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from autotune.core.workload.datasets import FORMATS, source_of, validate_dataset_spec
from autotune.core.workload.datasets.common import LoadedRequests
from autotune.core.workload.datasets.synthetic import lines, profile_text
from autotune.core.workload.profiles import DatasetSpec, WorkloadProfile, parse_profiles
from autotune.errors import ConfigError
from autotune.shell.bench.files import read_profiles
from autotune.shell.bench.workloads import load_tokenizer, sources_for

pytestmark = pytest.mark.vllm  # every test here runs vLLM's own code or a tokenizer

PROFILE = WorkloadProfile(name="p", num_prompts=4, warmup_requests=1)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from autotune.modelgen.checkpoints import write_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer(folder, 512)
    return load_tokenizer(str(folder))


def source(fmt: str, text: str | None, tokenizer, **options):
    spec = validate_dataset_spec(DatasetSpec(fmt, "data" if FORMATS[fmt].reads_file else "", options), "test")
    return source_of(spec, text, tokenizer, "data.jsonl")


def write(tmp_path: Path, name: str, rows: list) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_takes_text_or_token_ids_and_counts_text_with_the_tokenizer(tokenizer):
    loaded = source("jsonl", "\n".join(json.dumps(r) for r in [
        {"prompt": "the model and the cache", "output_len": 8},
        {"prompt_token_ids": [5, 6, 7], "output_len": 3},
    ]), tokenizer)
    assert [(r.prompt, r.prompt_len, r.output_len) for r in loaded.pool] == [
        ("the model and the cache", 5, 8), ((5, 6, 7), 3, 3)]
    assert not loaded.timed


@pytest.mark.parametrize(("rows", "message"), [
    (['{"prompt": "a b", "output_len": 4', ], "data.jsonl: line 1: not JSON"),
    ([{"output_len": 4}], r"data.jsonl: line 1: no prompt: give prompt \(text\) or prompt_token_ids"),
    ([{"prompt": "a", "output_len": 4}, {"prompt": "b", "output_len": 0}],
     "data.jsonl: line 2: output_len must be an integer >= 1, got 0"),
    ([{"prompt": "a", "output_len": 4, "timestamp_ms": 0}, {"prompt": "b", "output_len": 4}],
     "data.jsonl: line 2: timestamp_ms must be on every line or on none"),
    ([{"prompt_token_ids": [], "output_len": 4}], "line 1: prompt_token_ids must be a non-empty list"),
], ids=["not-json", "no-prompt", "bad-output-len", "partial-timestamps", "empty-ids"])
def test_bad_jsonl_is_one_line_naming_file_line_and_field(tokenizer, rows, message):
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows)
    with pytest.raises(ConfigError, match=message):
        source("jsonl", text, tokenizer)


def test_a_file_is_sampled_with_the_seed_in_its_own_order_and_a_trace_keeps_its_times(tokenizer):
    plain = source("jsonl", "\n".join(json.dumps({"prompt_token_ids": [i + 3], "output_len": 2})
                                      for i in range(20)), tokenizer)
    a, b = plain.requests(PROFILE, 5, seed=1), plain.requests(PROFILE, 5, seed=2)
    assert a == plain.requests(PROFILE, 5, seed=1) and a != b
    assert [r.prompt for r in a] == sorted(r.prompt for r in a)  # the file's order
    timed = source("jsonl", "\n".join(json.dumps({"prompt_token_ids": [3], "output_len": 2,
                                                  "timestamp_ms": 100 * i}) for i in range(20)),
                   tokenizer, time_scale=0.5)
    window = timed.requests(PROFILE, 4, seed=3)
    assert [r.send_at_s for r in window] == pytest.approx([0.0, 0.05, 0.1, 0.15])  # twice as fast


def test_sharegpt_is_read_as_vllms_benchmark_reads_it(tokenizer):
    turn = " ".join(["cache"] * 10)
    entries = [
        {"conversations": [{"from": "human", "value": turn}, {"from": "gpt", "value": "a b c d e"}]},
        {"conversations": [{"from": "human", "value": turn}]},  # one turn: dropped
        {"conversations": [{"from": "human", "value": "a b"}, {"from": "gpt", "value": turn}]},  # < 4
        {"conversations": [{"from": "human", "value": " ".join(["a"] * 1100)},
                           {"from": "gpt", "value": turn}]},  # prompt > 1024 tokens
    ]
    loaded = source("sharegpt", json.dumps(entries), tokenizer)
    assert [(r.prompt, r.prompt_len, r.output_len) for r in loaded.pool] == [(turn, 10, 5)]
    assert loaded.lines == (1,)


def test_mooncake_blocks_with_equal_hash_ids_are_equal_prompt_prefixes(tokenizer):
    trace = [{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [7, 8]},
             {"timestamp": 250, "input_length": 700, "output_length": 5, "hash_ids": [7, 9]},
             {"timestamp": 500, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}]
    loaded = source("mooncake", "\n".join(json.dumps(t) for t in trace), tokenizer)
    a, b, c = loaded.pool
    assert (a.prompt_len, len(a.prompt), b.prompt_len) == (1000, 1000, 700)
    assert a.prompt[:512] == b.prompt[:512] and a.prompt[512:600] != b.prompt[512:600]
    assert a.prompt[:512] != c.prompt[:512]
    assert [r.send_at_s for r in loaded.pool] == [0.0, 0.25, 0.5]
    with pytest.raises(ConfigError, match="data.jsonl: line 1: input_length 1025 needs 3 blocks"):
        source("mooncake", json.dumps({**trace[0], "input_length": 1025}), tokenizer)
    with pytest.raises(ConfigError, match="line 1: missing field.s. hash_ids"):
        source("mooncake", json.dumps({k: v for k, v in trace[0].items() if k != "hash_ids"}), tokenizer)


def test_shared_prefix_groups_share_their_prefix_and_a_new_seed_makes_new_prefixes(tokenizer):
    gen = source("shared-prefix", None, tokenizer, groups=2, prompts_per_group=4, prefix_len=32,
                 suffix_len=8, output_len=4, token_ids=True)
    first = gen.requests(PROFILE, 8, seed=0)
    prefixes = {r.prompt[:32] for r in first}
    assert len(prefixes) == 2 and all(r.prompt_len == 40 for r in first)
    assert prefixes.isdisjoint({r.prompt[:32] for r in gen.requests(PROFILE, 8, seed=1)})
    text = source("shared-prefix", None, tokenizer, groups=2, prefix_len=32, suffix_len=8)
    assert all(isinstance(r.prompt, str) and r.prompt_len == 40 for r in text.requests(PROFILE, 4, 0))


def test_random_text_is_as_long_as_asked_after_re_tokenization(tokenizer):
    profile = WorkloadProfile(name="r", input_len=64, output_len=16, range_ratio=0.5)
    made = source("random", None, tokenizer).requests(profile, 20, seed=0)
    assert all(isinstance(r.prompt, str) for r in made)
    assert all(len(tokenizer.encode(r.prompt, add_special_tokens=False)) == r.prompt_len for r in made)
    assert min(r.prompt_len for r in made) < 64 < max(r.prompt_len for r in made)


@pytest.mark.parametrize("kind", ["chat", "rag", "agentic"])
def test_made_workloads_are_read_back_by_their_format(tokenizer, kind):
    made = lines(kind, 30, seed=0, scale=0.05)
    fmt = "mooncake" if kind == "agentic" else "jsonl"
    loaded = source(fmt, "\n".join(made), tokenizer)
    assert len(loaded.pool) == 30 and all(r.prompt_len >= 1 for r in loaded.pool)
    assert loaded.timed == (kind == "agentic")


@pytest.mark.parametrize(("kind", "requests", "measured"), [("chat", 200, 100), ("chat", 12, 4),
                                                           ("agentic", 3, 1)])
def test_a_made_workloads_profile_measures_what_the_file_holds_beyond_its_warm_up(kind, requests,
                                                                                measured):
    [profile] = parse_profiles(profile_text(kind, "w.jsonl", requests=requests, seed=0, scale=1.0),
                               "w.profile.yaml").values()
    assert (profile.name, profile.num_prompts, profile.dataset.path) == (kind, measured, "w.jsonl")
    assert profile.num_prompts + profile.warmup_requests <= max(requests, 1 + profile.warmup_requests)


def test_a_profile_file_points_at_data_relative_to_itself_and_bad_data_stops_before_deploying(
        tmp_path, tokenizer):
    write(tmp_path, "reqs.jsonl", [{"prompt": "the cache " * 20, "output_len": 4}] * 6)
    (tmp_path / "p.yaml").write_text("chat:\n  num_prompts: 4\n  warmup_requests: 1\n"
                                     "  dataset: {format: jsonl, path: reqs.jsonl}\n")
    profile = read_profiles(tmp_path / "p.yaml")["chat"]
    assert profile.dataset.path == str(tmp_path / "reqs.jsonl")
    done, sources = sources_for([profile], vocab_size=512, tokenizer=tokenizer, max_model_len=4096)
    assert len(done[0].dataset.sha256) == 64 and isinstance(sources["chat"], LoadedRequests)
    again = done[0]
    (tmp_path / "reqs.jsonl").write_text((tmp_path / "reqs.jsonl").read_text() + "\n")
    with pytest.raises(ConfigError, match="reqs.jsonl: its content changed since the study was created"):
        sources_for([again], vocab_size=512, tokenizer=tokenizer, max_model_len=4096)
    with pytest.raises(ConfigError, match=r"reqs.jsonl: line 1: prompt of 40 tokens \+ output_len 4 "
                                          "exceeds the deployment's max model length 32"):
        sources_for([profile], vocab_size=512, tokenizer=tokenizer, max_model_len=32)
    many = dataclasses.replace(profile, num_prompts=10)
    with pytest.raises(ConfigError, match="6 requests, but profile 'chat' sends 12 .num_prompts 10 "
                                          "\\+ 2 warm-up requests"):
        sources_for([many], vocab_size=512, tokenizer=tokenizer, max_model_len=4096)
    missing = DatasetSpec("jsonl", str(tmp_path / "gone.jsonl"))
    with pytest.raises(ConfigError, match="cannot read .*gone.jsonl: No such file"):
        sources_for([WorkloadProfile(name="x", dataset=missing)], vocab_size=512, tokenizer=tokenizer,
                    max_model_len=4096)


@pytest.mark.parametrize(("dataset", "message"), [
    ("{format: csv, path: a}", "dataset format 'csv' is not known; valid: jsonl, sharegpt"),
    ("{format: jsonl}", "dataset format jsonl reads a file: give its path"),
    ("{format: shared-prefix, groups: 2, prefix: 3}", "dataset option.s. prefix are not shared-prefix's"),
    ("{format: shared-prefix, path: x}", "dataset format shared-prefix is generated and reads no path"),
], ids=["unknown-format", "no-path", "unknown-option", "path-on-generated"])
def test_a_bad_dataset_field_names_the_profile_and_what_is_valid(tokenizer, dataset, message):
    profile = parse_profiles(f"chat:\n  dataset: {dataset}\n", "p.yaml")["chat"]
    with pytest.raises(ConfigError, match=message):
        sources_for([profile], vocab_size=512, tokenizer=tokenizer, max_model_len=4096)


def test_a_tokenizers_backend_loads_as_auto_tokenizer_would_without_importing_torch(tmp_path):
    """`bench` and `run` load the model's tokenizer before their first request; AutoTokenizer's
    module imports torch and transformers' generation code (15-20 s on a GPU machine). A
    tokenizer.json backend loads as the very class AutoTokenizer resolves it to, with the same
    ids, and torch stays unimported."""
    import subprocess
    import sys

    from transformers import AutoTokenizer

    from autotune.modelgen.checkpoints import write_tokenizer

    write_tokenizer(tmp_path, 512)
    ours, auto = load_tokenizer(str(tmp_path)), AutoTokenizer.from_pretrained(str(tmp_path))
    text = " ".join(["alpha", "beta", "gamma", "delta"] * 50)
    assert type(ours) is type(auto)
    assert ours(text).input_ids == auto(text).input_ids and ours.vocab_size == auto.vocab_size
    probe = ("import sys; from autotune.shell.bench.workloads import load_tokenizer; "
             f"load_tokenizer({str(tmp_path)!r}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
