"""Search spaces and reference configs: loading, model awareness, and the flags they make."""

from __future__ import annotations

import json
import textwrap

import pytest

from autotune.core.deployment.flags import argv_to_options, options_to_config, to_argv, to_options
from autotune.core.space.search_space import (
    ModelContext,
    complete,
    drawable_points,
    fixed,
    inapplicable,
    resolve_references,
    sample,
    space_size,
)
from autotune.core.space.space_yaml import parse_space
from autotune.errors import SpaceError
from autotune.shell.bench.files import read_references, read_space
from tests.helpers import SPACES

YARN = ("--hf-overrides", json.dumps({
    "max_position_embeddings": 81920,
    "rope_parameters": {"factor": 2.5, "original_max_position_embeddings": 32768,
                        "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "rope_type": "yarn"},
}, separators=(",", ":"), sort_keys=True))
MTP = ("--speculative-config", '{"method":"mtp","num_speculative_tokens":1}')
FIXED = ("--tensor-parallel-size", "2", "--max-model-len", "81920")


def baseline(opt="3", mode="throughput", ep="--enable-expert-parallel", yarn=YARN, mtp=MTP):
    return [*FIXED, "--optimization-level", opt, "--performance-mode", mode, ep, *yarn, *mtp]


EXPECTED_ARGV = {
    "opt3-baseline": baseline(),
    "opt0": baseline(opt="0"),
    "opt1": baseline(opt="1"),
    "opt2": baseline(opt="2"),
    "mode-balanced": baseline(mode="balanced"),
    "mode-interactivity": baseline(mode="interactivity"),
    "no-ep": baseline(ep="--no-enable-expert-parallel"),
    "no-mtp": baseline(mtp=()),
}


@pytest.fixture
def space():
    return read_space(SPACES / "reference.yaml")


@pytest.fixture
def refs(space):
    return read_references(SPACES / "references.yaml", space)


@pytest.mark.parametrize("name", list(EXPECTED_ARGV), ids=list(EXPECTED_ARGV))
def test_each_reference_config_maps_to_the_expected_argv(space, refs, moe_mtp_info, name):
    ctx = ModelContext(moe_mtp_info, 81920)
    resolved = {r.name: r for r in resolve_references(space, ctx, refs.configs)}
    assert resolved[name].skipped == ""
    assert to_argv(space, ctx, resolved[name].params) == EXPECTED_ARGV[name]


def test_the_interleave_reference_is_skipped_without_decode_context_parallel(
    space, refs, moe_mtp_info
):
    ctx = ModelContext(moe_mtp_info, 81920)
    resolved = {r.name: r for r in resolve_references(space, ctx, refs.configs)}
    assert resolved["cp-interleave-16"].skipped == (
        "does not apply (cp_kv_cache_interleave_size: only with "
        "deployment.decode_context_parallel_size >= 2)")


def test_beyond_the_native_context_yarn_is_fixed_on_and_the_reference_without_it_is_skipped(
    space, refs, moe_mtp_info
):
    ctx = ModelContext(moe_mtp_info, 81920)
    resolved = {r.name: r for r in resolve_references(space, ctx, refs.configs)}
    assert resolved["no-yarn"].skipped == (
        "does not apply (yarn: fixed on here (81,920 > the model's native context 32,768: "
        "vLLM refuses it off))")
    assert fixed(space, ctx) == {"yarn": True}
    assert complete(space, ctx, {"yarn": False})["yarn"] is True
    trial = FixedTrial({"yarn": False})  # what a sampler would draw, were it offered
    assert sample(space, ctx, trial)["yarn"] is True and trial.offered["yarn"] == [True]
    # At the native context YaRN does not apply: nothing is fixed.
    assert fixed(space, ModelContext(moe_mtp_info, 32768)) == {}


def test_required_is_only_for_a_bool_that_applies_somewhere(tmp_path):
    with pytest.raises(SpaceError, match="parameter 'k': required must be true or false, and "
                       "true only for a bool parameter with applies_to"):
        parse_space("parameters:\n  - {name: k, type: bool, default: false, flag: --k, "
                    "required: true}\n", "s.yaml")


def test_the_baseline_is_opt3(refs):
    assert refs.baseline == "opt3-baseline" and len(refs.configs) == 10


def test_dense_model_drops_moe_and_mtp_parameters_and_the_references_that_only_change_them(
    space, refs, dense_info
):
    ctx = ModelContext(dense_info, 81920)
    assert inapplicable(space, ctx) == {
        "expert_parallel": "the model is not a mixture of experts",
        "mtp": "the model has no MTP (multi-token prediction) layers",
        "cp_kv_cache_interleave_size": "only with deployment.decode_context_parallel_size >= 2"}
    skipped = {r.name: r.skipped for r in resolve_references(space, ctx, refs.configs) if r.skipped}
    assert skipped == {
        "no-ep": "does not apply (expert_parallel: the model is not a mixture of experts)",
        "no-mtp": "does not apply (mtp: the model has no MTP (multi-token prediction) layers)",
        "no-yarn": "does not apply (yarn: fixed on here (81,920 > the model's native context "
                   "32,768: vLLM refuses it off))",
        "cp-interleave-16": "does not apply (cp_kv_cache_interleave_size: only with "
                            "deployment.decode_context_parallel_size >= 2)",
    }


def test_yarn_applies_only_beyond_the_native_context(space, moe_mtp_info):
    assert "yarn" not in inapplicable(space, ModelContext(moe_mtp_info, 81920))
    assert "yarn" in inapplicable(space, ModelContext(moe_mtp_info, 32768))


class FixedTrial:
    """Suggests the first choice or the low end: a deterministic stand-in for optuna.Trial."""

    def __init__(self, picks=None):
        self.picks = picks or {}
        self.asked = []

    def suggest_categorical(self, name, choices):
        self.asked.append(name)
        self.offered = {**getattr(self, "offered", {}), name: list(choices)}
        pick = self.picks.get(name, choices[0])
        return pick if pick in choices else choices[0]

    def suggest_int(self, name, low, high, *, step=1, log=False):
        self.asked.append(name)
        return self.picks.get(name, low)

    def suggest_float(self, name, low, high, *, step=None, log=False):
        self.asked.append(name)
        return self.picks.get(name, low)


def test_conditional_parameters_are_sampled_only_when_their_condition_holds(moe_mtp_info):
    space = read_space(SPACES / "extended.yaml")
    ctx = ModelContext(moe_mtp_info, 81920)
    off = FixedTrial({"mtp": False, "enable_chunked_prefill": False})
    sample(space, ctx, off)
    assert "num_speculative_tokens" not in off.asked and "max_num_batched_tokens" not in off.asked
    on = FixedTrial({"mtp": True, "num_speculative_tokens": 3, "enable_chunked_prefill": True})
    params = sample(space, ctx, on)
    options = to_options(space, ctx, params)
    assert options["--speculative-config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert "--max-num-batched-tokens" in options


def with_dcp(space, dcp):
    """The space with --decode-context-parallel-size set in its deployment (None: unset)."""
    flags = f"\n  flags: {{--decode-context-parallel-size: {dcp}}}" if dcp else ""
    return parse_space(space.text.replace("  max_model_len: 81920",
                                          "  max_model_len: 81920" + flags), space.path)


@pytest.mark.parametrize("dcp, drawn", [(None, False), (1, False), (2, True)],
                         ids=["dcp-unset", "dcp-1", "dcp-2"])
def test_the_kv_interleave_is_drawn_only_with_decode_context_parallel(space, moe_mtp_info,
                                                                     dcp, drawn):
    space = with_dcp(space, dcp)
    ctx = ModelContext(moe_mtp_info, 81920)
    trial = FixedTrial()
    params = sample(space, ctx, trial)
    assert ("cp_kv_cache_interleave_size" in trial.asked) is drawn
    assert ("--cp-kv-cache-interleave-size" in to_argv(space, ctx, params)) is drawn
    assert ("cp_kv_cache_interleave_size" in complete(space, ctx, {})) is drawn


@pytest.mark.parametrize("dcp, size", [(None, 4 * 3 * 2 * 2), (2, 4 * 3 * 2 * 2 * 2)],
                         ids=["dcp-unset", "dcp-2"])
def test_the_space_size_counts_only_what_can_be_drawn(space, moe_mtp_info, dense_info,
                                                       dcp, size):
    space = with_dcp(space, dcp)
    assert space_size(space, ModelContext(moe_mtp_info, 81920)) == size
    # A dense model: no expert parallel, no MTP.
    assert space_size(space, ModelContext(dense_info, 81920)) == size // 4


def test_the_space_size_sums_the_branches_of_a_condition_on_a_parameter(moe_mtp_info):
    # mtp off: 1 way; mtp on: 4 speculative token counts; so 5, not 2 x 4.
    space = parse_space(
        "parameters:\n"
        "  - {name: mtp, type: bool, default: false, flag: --mtp}\n"
        "  - {name: k, type: int, low: 1, high: 4, default: 1, flag: --k, when: {mtp: true}}\n"
        "  - {name: m, type: categorical, choices: [a, b, c], default: a, flag: --m}\n", "s.yaml")
    assert space_size(space, ModelContext(moe_mtp_info, 4096)) == 5 * 3


def test_the_drawable_points_are_what_sample_can_draw_and_as_many_as_the_space_size(
    space, moe_mtp_info
):
    ctx = ModelContext(moe_mtp_info, 81920)
    points = drawable_points(space, ctx)
    assert len(points) == space_size(space, ctx) == 48  # YaRN fixed on: half of 96
    assert len({json.dumps(p, sort_keys=True) for p in points}) == len(points)
    assert all(sample(space, ctx, FixedTrial(p)) == p for p in points)


def test_a_condition_on_a_model_fact(moe_mtp_info, dense_info):
    space = parse_space(
        "parameters:\n"
        "  - {name: a, type: bool, default: false, flag: --a, when: {model.num_experts: {min: 2}}}\n",
        "s.yaml")
    assert complete(space, ModelContext(moe_mtp_info, 4096), {}) == {"a": False}
    assert complete(space, ModelContext(dense_info, 4096), {}) == {}
    assert complete(space, None, {}) == {"a": False}  # results measured elsewhere: unknown model


def test_a_condition_on_the_platform_holds_only_there(moe_mtp_info):
    space = parse_space(
        "parameters:\n"
        "  - {name: ep, type: bool, default: false, flag: --ep, when: {platform: gpu}}\n"
        "  - {name: c, type: bool, default: false, flag: --c, when: {platform: [cpu, gpu]}}\n",
        "s.yaml")
    gpu, cpu = (ModelContext(moe_mtp_info, 4096, platform) for platform in ("gpu", "cpu"))
    assert complete(space, gpu, {}) == {"ep": False, "c": False}
    assert complete(space, cpu, {}) == {"c": False}
    assert inapplicable(space, cpu) == {"ep": 'only with platform "gpu"'}
    assert "ep" not in inapplicable(space, gpu)
    assert complete(space, ModelContext(moe_mtp_info, 4096), {}) == {"ep": False, "c": False}  # unknown
    assert space_size(space, gpu) == 2 * space_size(space, cpu) == 4


def test_a_cpu_study_never_draws_expert_parallel_from_the_reference_space(space, moe_mtp_info):
    cpu = ModelContext(moe_mtp_info, 81920, "cpu")
    points = drawable_points(space, cpu)
    assert points and all("expert_parallel" not in p for p in points)
    assert len(points) == space_size(space, cpu) == space_size(
        space, ModelContext(moe_mtp_info, 81920, "gpu")) // 2
    trial = FixedTrial({"expert_parallel": True})
    assert "expert_parallel" not in sample(space, cpu, trial) and "expert_parallel" not in trial.asked
    assert "--enable-expert-parallel" in to_argv(space, ModelContext(moe_mtp_info, 81920, "gpu"),
                                                 {"expert_parallel": True})


def test_on_cpu_the_baseline_drops_expert_parallel_and_the_reference_that_only_changes_it_is_skipped(
    space, refs, moe_mtp_info
):
    resolved = {r.name: r for r in resolve_references(space, ModelContext(moe_mtp_info, 81920, "cpu"),
                                                      refs.configs)}
    assert "expert_parallel" not in resolved["opt3-baseline"].params and not resolved["opt3-baseline"].skipped
    assert resolved["opt3-baseline"].params["mtp"] is True  # the rest of the baseline is kept
    assert resolved["no-ep"].skipped == 'does not apply (expert_parallel: only with platform "gpu")'
    assert not resolved["opt0"].skipped


def test_config_file_mapping_holds_the_same_options_as_argv(space, moe_mtp_info):
    ctx = ModelContext(moe_mtp_info, 81920)
    params = complete(space, ctx, {"mtp": True, "expert_parallel": False})
    config = options_to_config("/models/moe", to_options(space, ctx, params))
    # vLLM turns each key back into --key value: the file holds exactly the argv's options.
    assert argv_to_options(to_argv(space, ctx, params)) == {
        f"--{k}": v for k, v in config.items() if k != "model"}
    assert config["model"] == "/models/moe"
    assert config["enable-expert-parallel"] is False
    assert config["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 1}


# ----------------------------------------------------------------- malformed input

GOOD_PARAM = "  - {name: a, type: categorical, choices: [1, 2], default: 1, flag: --a}\n"

MALFORMED = {
    "yaml-syntax": ("parameters: [\n  - {name: a", "line 2: YAML syntax error"),
    "unknown-type": (
        "parameters:\n  - {name: a, type: list, default: 1, flag: --a}\n",
        "parameter 'a': unknown type 'list'; valid: categorical, int, float, bool"),
    "empty-choices": (
        "parameters:\n  - {name: mtp, type: categorical, choices: [], default: 1, flag: --a}\n",
        "parameter 'mtp': choices must be a non-empty list"),
    "low-above-high": (
        "parameters:\n  - {name: n, type: int, low: 9, high: 2, default: 5, flag: --n}\n",
        "parameter 'n': low (9) must be <= high (2)"),
    "unknown-condition": (
        "parameters:\n" + GOOD_PARAM +
        "  - {name: b, type: bool, default: false, flag: --b, when: {zzz: 1}}\n",
        "parameter 'b': condition names unknown parameter 'zzz'"),
    "bad-condition-mapping": (
        "parameters:\n" + GOOD_PARAM +
        "  - {name: b, type: bool, default: false, flag: --b, when: {a: {max: 1}}}\n",
        "parameter 'b': condition on 'a': a mapping must be {min: N}, got keys ['max']"),
    "unknown-platform": (
        "parameters:\n  - {name: a, type: bool, default: false, flag: --a, when: {platform: tpu}}\n",
        "parameter 'a': when: platform 'tpu' is unknown; valid: cpu, gpu"),
    "platform-as-a-number": (
        "parameters:\n  - {name: a, type: bool, default: false, flag: --a, "
        "when: {platform: {min: 1}}}\n",
        "parameter 'a': when: platform {'min': 1} is unknown; valid: cpu, gpu"),
    "default-outside": (
        "parameters:\n  - {name: a, type: categorical, choices: [1, 2], default: 3, flag: --a}\n",
        "parameter 'a': default 3 is outside the parameter's domain"),
    "no-mapping": (
        "parameters:\n  - {name: a, type: bool, default: false}\n",
        "parameter 'a': needs exactly one vLLM mapping: 'flag' or 'json'"),
    "unknown-derived": (
        "parameters:\n  - {name: y, type: bool, default: false, json: {flag: --hf-overrides, "
        "set: {f: '${nope}'}}}\n",
        "parameter 'y': unknown derived value '${nope}'"),
}


@pytest.mark.parametrize("case", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_space_gives_one_line_error_naming_file_and_parameter(tmp_path, case):
    text, expected = MALFORMED[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as info:
        read_space(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and expected in message
    assert "\n" not in message


REF_CASES = {
    "unknown-parameter": ("configs:\n  - {name: r, params: {zzz: 1}}\n",
                          "reference 'r': unknown parameter 'zzz'"),
    "value-outside-space": ("configs:\n  - {name: r, params: {optimization_level: 7}}\n",
                            "reference 'r': value 7 of 'optimization_level' is outside the space"),
    "unknown-base": ("configs:\n  - {name: r, base: nope, params: {}}\n",
                     "reference 'r': base 'nope' is not defined above it"),
}


@pytest.mark.parametrize("case", list(REF_CASES), ids=list(REF_CASES))
def test_malformed_reference_gives_one_line_error(tmp_path, space, case):
    text, expected = REF_CASES[case]
    path = tmp_path / "refs.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(SpaceError, match="^" + str(path).replace(".", r"\.") + ": ") as info:
        read_references(path, space)
    assert expected in str(info.value)


def test_validate_shows_expert_parallel_as_not_applying_on_cpu(space, moe_mtp_info):
    from rich.console import Console

    from autotune.study.output.tables import space_table

    def shown(platform: str) -> str:
        console = Console(record=True, width=250)
        skip = inapplicable(space, ModelContext(moe_mtp_info, 81920, platform))
        console.print(space_table(space, skip, 250))
        return next(line for line in console.export_text().splitlines() if "expert_parallel" in line)

    assert 'only with platform "gpu"' in shown("cpu")
    assert "only with" not in shown("gpu") and shown("gpu").rstrip(" │|").endswith("yes")
