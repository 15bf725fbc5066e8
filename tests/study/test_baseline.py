"""The baseline a study measures first, the calibration redeployment after it, the noise a study
inherits from another of the same storage, and the sampler's start sized to the budget.

The studies here run through the runner's seam with a stand-in trial function
(``tests.test_runner.StandIn``: measurements computed from the flags with seeded noise, no vLLM
deployed); what it stands in for is tested against real deployments in test_study.py.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from optuna.storages import InMemoryStorage

from autotune.cli import main
from autotune.core.analysis.recommendation import TieSettings, recommend_each
from autotune.core.analysis.recommendation import table as recommendation_table
from autotune.core.analysis.study_data import noise_line
from autotune.core.deployment.baseline import (
    VLLM_DEFAULTS,
    Command,
    baseline_of_options,
    command_words,
    defaults_baseline,
    masked,
)
from autotune.core.deployment.flags import argv_to_options, to_argv
from autotune.core.plan.budget import start_up
from autotune.core.plan.study_request import StudyRequest
from autotune.core.space.model_facts import parse_config
from autotune.core.space.search_space import ModelContext
from autotune.core.space.space_yaml import parse_space
from autotune.errors import ConfigError
from autotune.study.output.export import Export, export_of
from autotune.study.run.study_plan import build_plan, read_given, stored_request
from autotune.study.run.study_setup import dry_run_argv
from autotune.study.store.records import outcomes, study_data
from tests.helpers import GLM_MOE_MTP_CONFIG, REFERENCES, SPACE, Said, StandIn, ids, run, run_in_memory

# A space whose fixed context is longer than the model's (32768), as the default space is:
# every configuration needs YaRN there, vLLM's defaults (the model's native context) do not.
LONG_SPACE = SPACE.replace("max_model_len: 4096", "max_model_len: 81920") + """
  - name: yarn
    type: bool
    default: false
    applies_to: long_context
    json:
      flag: --hf-overrides
      set: {max_position_embeddings: "${max_model_len}", rope_parameters: {rope_type: yarn,
            factor: "${yarn_factor}", original_max_position_embeddings: "${native_context}"}}
"""
MTP = '{"method":"mtp","num_speculative_tokens":1}'


def files(tmp_path: Path, model_config: dict = GLM_MOE_MTP_CONFIG, model: str = "model") -> Path:
    folder = tmp_path / model
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model_config))
    (tmp_path / "space.yaml").write_text(SPACE)
    (tmp_path / "refs.yaml").write_text(REFERENCES)
    return folder


def plan_of(tmp_path: Path, *, trials: int, name: str = "s", model: str = "model",
            references: bool = False, parser=None, say=lambda text: None, **settings):
    """A plan of the test space; a --baseline read by autotune's own reading (``parser``
    None), or by vLLM's parser (``parser=True``, tests marked vllm)."""
    folder = files(tmp_path, model=model)
    return build_plan(parser=parser, say=say, request=StudyRequest(
        workdir=tmp_path / "studies", profiles=(ids("low-concurrency"), ids("high-concurrency")),
        model=str(folder), space_path=str(tmp_path / "space.yaml"),
        references_path=str(tmp_path / "refs.yaml") if references else None,
        baseline_references=str(tmp_path / "refs.yaml"), trials=trials, repeats=1, seed=1,
        study_name=name, **{"baseline": VLLM_DEFAULTS, **settings}))


def ctx_of(space_text: str, max_model_len: int):
    space = parse_space(space_text, "space.yaml")
    return space, ModelContext(parse_config("m", GLM_MOE_MTP_CONFIG), max_model_len, "cpu")


# --- the pure part: flags back to parameters ---------------------------------------------------

def test_vllms_defaults_set_no_tuned_flag_and_run_at_the_models_native_context():
    space, ctx = ctx_of(LONG_SPACE, 81920)
    b = defaults_baseline(space, ctx)
    assert b.argv == ("--tensor-parallel-size", "1")  # no --max-model-len: vLLM derives 32768
    # every parameter at its default; YaRN does not apply at the native context
    assert b.params == {"optimization_level": 2, "mtp": False, "expert_parallel": False}
    assert b.context(ctx).max_model_len == 32768


@pytest.mark.parametrize("form", ["shell", "yaml", "json"])
def test_what_export_writes_reads_back_as_the_same_baseline(tmp_path, form):
    space, ctx = ctx_of(SPACE, 4096)
    params = {"optimization_level": 0, "mtp": True, "expert_parallel": True}
    flags = (*to_argv(space, ctx, params), "--max-num-seqs", "96")
    export = Export(3, "/models/m", flags, entrypoint=("/venv/bin/python", "-m",
                    "vllm.entrypoints.openai.api_server"), env={"VLLM_CPU_KVCACHE_SPACE": "4"})
    path = tmp_path / f"serve.{ {'shell': 'sh'}.get(form, form) }"
    path.write_text(export.render(form))
    given = read_given(str(path), None)
    assert given is not None and given.model == "/models/m"
    read = baseline_of_options(space, ctx, given.options, name="f", where="f")
    assert read.baseline.params == params and read.baseline.max_model_len == 4096
    assert read.fixed == {"--max-num-seqs": 96}


def test_flags_the_space_does_not_tune_become_fixed_flags_on_the_baseline():
    space, ctx = ctx_of(SPACE, 4096)
    options = argv_to_options(shlex.split(
        "--max-num-seqs 128 --enable-prefix-caching -O0 --kv-cache-dtype fp8 --host 0.0.0.0"), "x")
    read = baseline_of_options(space, ctx, options, name="x", where="--baseline x")
    assert read.baseline.params == {"optimization_level": 0, "mtp": False, "expert_parallel": False}
    assert read.fixed == {"--max-num-seqs": 128, "--enable-prefix-caching": True,
                          "--kv-cache-dtype": "fp8"}  # the runner's own (--host) dropped
    # deployed as a trial of the same parameters is: every parameter's value rendered
    assert read.baseline.argv == ("--tensor-parallel-size", "1", "--max-num-seqs", "128",
                                  "--enable-prefix-caching", "--kv-cache-dtype", "fp8",
                                  "--optimization-level", "0", "--no-enable-expert-parallel")


@pytest.mark.parametrize(("given", "message"), [
    ("--tensor-parallel-size 4", "--baseline x: --tensor-parallel-size 4 conflicts with the "
                                 "study's 1 (--tp, or the space's deployment in space.yaml)"),
    ("--optimization-level 3", "--baseline x: outside the values the space space.yaml tunes: "
                               "--optimization-level 3 (optimization_level: one of 0, 2)"),
    # A tuned JSON flag is never a fixed flag: every trial would deploy 3 tokens while the
    # baseline is recorded as mtp off, and mtp on would overwrite it to 1.
    ('--speculative-config \'{"method":"mtp","num_speculative_tokens":3}\'',
     '--baseline x: outside the values the space space.yaml tunes: --speculative-config '
     '{"method":"mtp","num_speculative_tokens":3} (mtp: unset or '
     '{"method":"mtp","num_speculative_tokens":1})'),
    ('--speculative-config \'{"method":"mtp","num_speculative_tokens":1,"x":2}\'',
     '--baseline x: outside the values the space space.yaml tunes: --speculative-config '
     '{"method":"mtp","num_speculative_tokens":1,"x":2} (mtp: unset or '
     '{"method":"mtp","num_speculative_tokens":1})'),
], ids=["tensor-parallel", "outside-the-domain", "json-other-token-count", "json-extra-key"])
def test_a_conflict_with_the_space_is_one_line_naming_both_values(given, message):
    space, ctx = ctx_of(SPACE, 4096)
    with pytest.raises(ConfigError) as err:
        baseline_of_options(space, ctx, argv_to_options(shlex.split(given)), name="x",
                            where="--baseline x")
    assert str(err.value) == message


def test_a_conflict_with_the_spaces_own_deployment_flag_names_both_values():
    space, ctx = ctx_of(SPACE.replace("max_model_len: 4096}", "max_model_len: 4096, flags: "
                                      "{--max-num-seqs: 64}}"), 4096)
    with pytest.raises(ConfigError, match=r"^x: --max-num-seqs 128 conflicts with the space's "
                                          r"--max-num-seqs 64 \(space.yaml\)$"):
        baseline_of_options(space, ctx, {"--max-num-seqs": 128}, name="x", where="x")


def test_another_yarn_factor_is_one_line_naming_the_flag_and_what_the_space_tunes():
    space, ctx = ctx_of(LONG_SPACE, 81920)
    blob = {"max_position_embeddings": 81920, "rope_parameters": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    with pytest.raises(ConfigError) as err:
        baseline_of_options(space, ctx, {"--max-model-len": 81920, "--hf-overrides": blob},
                            name="x", where="x")
    assert str(err.value).startswith(
        'x: outside the values the space space.yaml tunes: --hf-overrides {"max_position_'
        'embeddings":81920,"rope_parameters":{"factor":4.0,') and "yarn: unset or" in str(err.value)
    assert '"factor":2.5' in str(err.value)  # what the space deploys at 81920 on 32768


def test_the_value_the_space_expresses_is_read_as_the_parameter_and_not_fixed():
    space, ctx = ctx_of(SPACE, 4096)
    read = baseline_of_options(space, ctx, {"--speculative-config": json.loads(MTP)},
                               name="x", where="x")
    assert read.baseline.params["mtp"] is True and read.fixed == {}


def test_a_baseline_whose_context_needs_yarn_deploys_the_yarn_its_record_says():
    # YaRN required wherever it applies, as in search_spaces/reference.yaml
    space, ctx = ctx_of(LONG_SPACE.replace("applies_to: long_context", "applies_to: "
                                           "long_context\n    required: true"), 81920)
    read = baseline_of_options(space, ctx, {"--max-model-len": 81920, "--optimization-level": 0},
                               name="x", where="x")
    assert read.baseline.params["yarn"] is True  # required beyond the native 32768
    assert "--hf-overrides" in read.baseline.argv
    assert read.baseline.argv == tuple(to_argv(space, ctx, read.baseline.params))


@pytest.mark.parametrize(("words", "shown"), [
    ("VLLM_API_KEY=sk-S1 vllm serve m --max-num-seqs 8", "VLLM_API_KEY=*** vllm serve m "
                                                        "--max-num-seqs 8"),
    ("--api_key sk-S1 -O0", "--api_key *** -O0"),
    ("--api-key=sk-S1 -O0", "--api-key=*** -O0"),
    ("--hf-token hf_S1 --hf_token=hf_S1", "--hf-token *** --hf_token=***"),
    ("--db-password pw --max-num-batched-tokens 8192 --tokenizer t",
     "--db-password *** --max-num-batched-tokens 8192 --tokenizer t"),
], ids=["environment", "underscore", "equals", "hf-token", "by-name"])
def test_every_echo_masks_environment_values_and_secret_options(words, shown):
    assert masked(shlex.split(words)) == shown


@pytest.mark.parametrize(("line", "command"), [
    ("--max-num-seqs 8", Command((), None, ("--max-num-seqs", "8"))),
    ("vllm serve /m/q --max-num-seqs 8", Command((), "/m/q", ("--max-num-seqs", "8"))),
    ("/opt/venv/bin/vllm serve q -tp 2", Command((), "q", ("-tp", "2"))),
    ("VLLM_CPU_KVCACHE_SPACE=8 python3 -m vllm.entrypoints.openai.api_server --model /m/q -O3",
     Command((("VLLM_CPU_KVCACHE_SPACE", "8"),), None, ("--model", "/m/q", "-O3"))),
    ("python -m vllm.entrypoints.cli.main serve q --enforce-eager",
     Command((), "q", ("--enforce-eager",))),
], ids=["flags", "vllm-serve", "script-path", "module-with-env", "cli-main"])
def test_a_command_line_is_taken_apart_into_environment_model_and_options(line, command):
    assert command_words(shlex.split(line)) == command


def test_values_read_back_as_numbers_only_where_they_are_numbers():
    options = argv_to_options(["--kv-cache-dtype", "nan", "--max-num-seqs", "128",
                               "--gpu-memory-utilization", "0.9"], "x")
    assert options == {"--kv-cache-dtype": "nan", "--max-num-seqs": 128,
                       "--gpu-memory-utilization": 0.9}


def test_list_and_dotted_options_read_back_as_vllm_takes_them():
    options = argv_to_options(["--middleware", "a", "b", "--compilation-config.mode", "3",
                               "--no-enable-prefix-caching"])
    assert options == {"--middleware": ["a", "b"], "--compilation-config": {"mode": 3},
                       "--enable-prefix-caching": False}


# --- read from what the user gives (autotune's own reading; vLLM's parser below) ---------------

def test_the_baseline_sets_the_model_and_context_a_study_deploys_when_none_is_given(tmp_path):
    folder = files(tmp_path)
    plan = build_plan(parser=None, request=StudyRequest(
        workdir=tmp_path / "w", profiles=(ids("low-concurrency"),),
        space_path=str(tmp_path / "space.yaml"), trials=1,
        baseline=f"vllm serve {folder} --max-model-len 2048 --max-num-seqs 16"))
    assert plan.model.name == str(folder) and plan.max_model_len == 2048
    assert plan.request.fixed_flags == ("--max-num-seqs", "16")
    assert plan.baseline.argv[:4] == ("--tensor-parallel-size", "1", "--max-model-len", "2048")


@pytest.mark.parametrize(("baseline", "message"), [
    ("vllm serve /elsewhere/q -O0", "--baseline 'vllm serve /elsewhere/q -O0': its model "
                                    "/elsewhere/q conflicts with --model {folder}"),
    ("--max-model-len 2048", "--baseline '--max-model-len 2048': --max-model-len 2048 conflicts "
                             "with the study's --max-model-len 4096"),
    ("missing/serve.yaml", "--baseline: no such file: missing/serve.yaml"),
    ("--max-num-seqs '128", "--baseline: cannot split the flags (No closing quotation); quote "
                            "them as a shell would"),
], ids=["model", "context", "missing-file", "unbalanced-quote"])
def test_what_conflicts_with_the_study_or_does_not_exist_is_one_line(tmp_path, baseline, message):
    folder = files(tmp_path)
    with pytest.raises(ConfigError) as err:
        plan_of(tmp_path, trials=1, baseline=baseline, max_model_len=4096)
    assert str(err.value) == message.format(folder=folder)


def test_a_missing_baseline_file_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    folder = files(tmp_path)
    workdir = tmp_path / "studies"
    code = main(["--workdir", str(workdir), "run", "--model", str(folder), "--space",
                 str(tmp_path / "space.yaml"), "--baseline", "nope/serve.yaml"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.endswith("--baseline: no such file: nope/serve.yaml")
    assert not workdir.exists()


def test_a_pasted_api_key_is_dropped_and_never_stored_or_echoed(tmp_path):
    plan = plan_of(tmp_path, trials=1, baseline="-O0 --api-key sk-secret --max-num-seqs 8")
    assert plan.request.fixed_flags == ("--max-num-seqs", "8")
    assert "sk-secret" not in json.dumps(plan.request.to_dict())
    assert "sk-secret" not in " ".join(plan.baseline.argv)
    with pytest.raises(ConfigError) as err:
        plan_of(tmp_path, trials=1, baseline="--api-key=sk-secret -O3")
    assert "sk-secret" not in str(err.value) and "--api-key=***" in str(err.value)


def test_a_pasted_api_key_in_any_spelling_is_never_in_the_message(tmp_path):
    given = read_given("--api_key sk-SECRET456 --max-num-seqs 128", None)
    assert given is not None and "SECRET456" not in given.where and "***" in given.where
    with pytest.raises(ConfigError) as err:
        plan_of(tmp_path, trials=1, baseline="VLLM_API_KEY=sk-SECRET123 vllm serve "
                                             "/nonexist/model --max-num-seqs 128", model="m2")
    assert "SECRET123" not in str(err.value) and "VLLM_API_KEY=***" in str(err.value)


@pytest.mark.vllm  # the baseline's command line is read by vLLM's parser
def test_a_secret_in_the_baseline_on_the_command_line_exits_2_without_echoing_it(
        tmp_path, capsys):
    workdir = tmp_path / "w"
    code = main(["--workdir", str(workdir), "run", "--dry-run", "--baseline",
                 "VLLM_API_KEY=sk-SECRET123 vllm serve /nonexist/model --max-num-seqs 128"])
    out, err = capsys.readouterr()
    assert code == 2 and "SECRET123" not in out + err and "VLLM_API_KEY=***" in err
    assert not workdir.exists()


@pytest.mark.parametrize("token", ["--hf-token hf_SECRET789", "--hf_token=hf_SECRET789",
                                   "--wandb-api-key hf_SECRET789"])
def test_a_secret_option_is_dropped_with_one_line_and_stored_nowhere(tmp_path, token):
    said: list[str] = []
    plan = plan_of(tmp_path, trials=2, baseline=f"-O0 {token} --max-num-seqs 8",
                   say=said.append, calibrate=False)
    assert plan.request.fixed_flags == ("--max-num-seqs", "8")
    assert [line for line in said if "not stored" in line] == [
        f"--baseline: {token.split()[0].split('=')[0].replace('_', '-')} not stored: a secret "
        "reaches vLLM through autotune's environment (HF_TOKEN for a Hugging Face token)"]
    stand_in = StandIn()
    study = run_in_memory(plan, stand_in)
    stored = json.dumps([study.user_attrs,
                         [(t.params, t.user_attrs, t.system_attrs) for t in study.trials]],
                        default=str)
    shown = [*said, json.dumps(plan.request.to_dict()), json.dumps(plan.baseline.to_dict()),
             stored, *map(" ".join, stand_in.calls),
             *(export_of(t).render(form) for t in outcomes(study) for form in ("shell", "yaml",
                                                                                "json"))]
    assert not [text for text in shown if "SECRET789" in text]
    assert "--max-num-seqs 8" in " ".join(stand_in.calls[0])


def test_config_given_with_equals_is_read_from_its_absolute_path(tmp_path, monkeypatch):
    files(tmp_path)
    (tmp_path / "prod.yaml").write_text("max-num-seqs: 64\noptimization-level: 0\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    given = read_given("--config=prod.yaml --kv-cache-dtype auto", None)
    assert given is not None
    assert given.options == {"--max-num-seqs": 64, "--optimization-level": 0,
                             "--kv-cache-dtype": "auto"}
    plan = plan_of(tmp_path, trials=1, baseline="--config=prod.yaml --kv-cache-dtype auto")
    assert plan.request.fixed_flags == ("--max-num-seqs", "64", "--kv-cache-dtype", "auto")
    assert plan.baseline.params["optimization_level"] == 0
    monkeypatch.chdir(elsewhere)  # a missing one is named by its absolute path
    with pytest.raises(ConfigError, match=f"no such file: {elsewhere}/prod.yaml$"):
        read_given("--config=prod.yaml", None)


# --- through the runner (stand-in trial function) ----------------------------------------------

def test_the_baseline_is_the_first_trial_before_the_references_and_every_verdict_compares_with_it(
        tmp_path):
    stand_in = StandIn()
    study = run_in_memory(plan_of(tmp_path, trials=4, references=True, calibrate=False,
                                  exploration="sampler"), stand_in)
    found = outcomes(study)
    # 'base' sets vLLM's defaults too: without vLLM's resolution here its parameters make it the
    # baseline's configuration, recorded as a copy and never deployed
    assert [t.reference for t in found[:3]] == [VLLM_DEFAULTS, "o0", "ep"]
    assert stand_in.calls[0] == ("--tensor-parallel-size", "1")
    data = study_data(study)
    assert data.baseline is not None and data.baseline.number == 0
    o0 = found[1]
    versus = data.versus_baseline(o0, "low-concurrency", "mean_e2el_ms")
    assert versus is not None and versus.verdict.value == "worse"  # -O0 doubles the latency


def test_the_dry_run_shows_the_baseline_first_then_the_exploration_order_then_the_references(
        tmp_path):
    plan = plan_of(tmp_path, trials=4, references=True)
    shown = dry_run_argv(plan, 4)
    assert shown[0] == ("trial 0 (baseline: vllm-defaults)", ["--tensor-parallel-size", "1"])
    assert [label for label, _ in shown[1:]] == [
        "trial 1 (exploration 1. mtp on (expected \u221222.9% latency, \u22126.8% throughput))",
        "trial 2 (exploration 2. expert_parallel on (expected +0.5% latency, +0.5% throughput))",
        "trial 3 (base)"]
    assert plan.exploration_text == (
        "exploration: 1. mtp on (expected \u221222.9% latency, \u22126.8% throughput) "
        "2. expert_parallel on (expected +0.5% latency, +0.5% throughput); then the sampler")
    assert plan_of(tmp_path, trials=4, exploration="sampler").exploration_text == (
        "exploration: the sampler from the first trial after the baseline")


@pytest.mark.parametrize("form", ["reference", "flags", "file"])
def test_baseline_given_as_a_reference_name_flags_or_an_exported_file(tmp_path, form):
    folder = files(tmp_path)
    export = tmp_path / "mine.yaml"
    export.write_text(f"# autotune: trial 3\nmodel: {folder}\ntensor-parallel-size: 1\n"
                      "max-model-len: 4096\noptimization-level: 0\n")
    given = {"reference": "o0", "flags": "--optimization-level 0 --max-model-len 4096",
             "file": str(export)}[form]
    stand_in = StandIn()
    study = run_in_memory(plan_of(tmp_path, trials=1, baseline=given, calibrate=False), stand_in)
    first = outcomes(study)[0]
    assert first.params["optimization_level"] == 0 and first.reference
    assert study_data(study).baseline.number == 0
    assert "--optimization-level" in stand_in.calls[0] and "--max-model-len" in stand_in.calls[0]


def test_the_fixed_flags_reach_every_trial_the_stored_plan_and_the_export(tmp_path):
    stand_in = StandIn()
    plan = plan_of(tmp_path, trials=4, baseline="--max-num-seqs 128 --enable-prefix-caching -O0")
    study = run_in_memory(plan, stand_in)
    assert len(stand_in.calls) >= 4  # the baseline, its calibration and sampled trials
    for argv in stand_in.calls:
        assert "--max-num-seqs 128 --enable-prefix-caching" in " ".join(argv), argv
    for t in outcomes(study):
        shell = export_of(t).render("shell")
        assert "--max-num-seqs 128" in shell and "--enable-prefix-caching" in shell
    again = build_plan(stored_request(study, storage="sqlite:///:memory:", workdir=tmp_path / "w",
                                      model=None, trials=None))  # a worker, a resumed run
    assert again.request.fixed_flags == ("--max-num-seqs", "128", "--enable-prefix-caching")
    assert "--max-num-seqs 128 --enable-prefix-caching" in " ".join(
        to_argv(again.space, again.ctx, {"optimization_level": 2}))


def test_a_run_that_resumes_with_other_fixed_flags_names_both(tmp_path):
    from autotune.study.run.study_plan import store_plan

    study = run_in_memory(plan_of(tmp_path, trials=1, baseline="--max-num-seqs 128",
                                  calibrate=False), StandIn())
    with pytest.raises(ConfigError) as err:
        store_plan(study, plan_of(tmp_path, trials=2))
    assert str(err.value) == (
        "study 's' deploys every trial with the fixed flags --max-num-seqs 128 (its --baseline); "
        "this run gives (none): give the same --baseline to resume it, join it with "
        "`autotune worker --study NAME`, or pick another --study name")


# --- vLLM's own parser (vLLM imported: the heavy tier) -----------------------------------------

@pytest.mark.vllm
def test_the_readme_baseline_runs_on_the_default_space_read_by_vllms_parser(tmp_path, capsys):
    """`autotune run --baseline '--max-num-seqs 128'` (the README's example) and
    `--gpu-memory-utilization 0.85` on the default space, through vLLM's parser; aliases and
    underscores read as vLLM reads them; an unknown flag is vLLM's own error."""
    folder = files(tmp_path)
    for given, fixed in [("--max-num-seqs 128", ("--max-num-seqs", "128")),
                         ("--gpu_memory_utilization=0.85 -tp 2",
                          ("--gpu-memory-utilization", "0.85"))]:
        plan = build_plan(StudyRequest(workdir=tmp_path / "w", profiles=(ids("low-concurrency"),),
                                      model=str(folder), trials=1, baseline=given))
        assert plan.space.name == "reference" and plan.request.fixed_flags == fixed
        assert " ".join(fixed) in " ".join(plan.baseline.argv)
    workdir = tmp_path / "studies"
    code = main(["--workdir", str(workdir), "run", "--model", str(folder), "--baseline",
                 "--no-such-flag 3"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and not workdir.exists()
    assert "vLLM's parser: unrecognized arguments: --no-such-flag" in err


@pytest.mark.vllm
def test_vllms_own_config_yaml_and_a_full_command_are_read_by_vllms_parser(tmp_path):
    folder = files(tmp_path)
    config = tmp_path / "prod.yaml"
    config.write_text(f"model: {folder}\nmax-num-seqs: 64\nenable-prefix-caching: false\n"
                      "optimization-level: 0\napi-key: sk-secret\n")
    plan = plan_of(tmp_path, trials=1, baseline=str(config), parser=True)
    assert plan.baseline.params["optimization_level"] == 0
    assert plan.request.fixed_flags == ("--max-num-seqs", "64", "--no-enable-prefix-caching")
    command = f"vllm serve {folder} --config {config} --kv_cache_dtype auto"
    plan = plan_of(tmp_path, trials=1, baseline=command, parser=True)
    assert plan.request.fixed_flags == ("--max-num-seqs", "64", "--no-enable-prefix-caching",
                                        "--kv-cache-dtype", "auto")
    assert "sk-secret" not in json.dumps(plan.request.to_dict())


@pytest.mark.vllm
def test_on_the_default_space_vllms_parser_drops_a_token_and_refuses_mtp_it_cannot_express(
        tmp_path):
    folder = files(tmp_path)
    (tmp_path / "prod.yaml").write_text("max-num-seqs: 64\nhf-token: hf_SECRETQ\n")

    def plan(given: str):
        return build_plan(StudyRequest(workdir=tmp_path / "w", profiles=(ids("low-concurrency"),),
                                      model=str(folder), trials=1, baseline=given))

    for given in ("--hf_token hf_SECRETQ --max-num-seqs 64", f"--config={tmp_path}/prod.yaml"):
        read = plan(given)
        assert read.request.fixed_flags == ("--max-num-seqs", "64")
        assert "SECRETQ" not in json.dumps([read.request.to_dict(), read.baseline.to_dict()])
    with pytest.raises(ConfigError) as err:
        plan("--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":3}'")
    assert str(err.value).endswith(
        'tunes: --speculative-config {"method":"mtp","num_speculative_tokens":3} (mtp: unset or '
        '{"method":"mtp","num_speculative_tokens":1})')


def test_calibrate_redeploys_the_baseline_once_and_the_noise_is_measured(tmp_path):
    stand_in = StandIn()
    said = Said()
    study = run_in_memory(plan_of(tmp_path, trials=3, calibrate=True), stand_in, progress=said)
    base_argv = ("--tensor-parallel-size", "1")
    assert stand_in.calls[:2] == [base_argv, base_argv] and stand_in.calls.count(base_argv) == 2
    line = noise_line(study_data(study))
    assert line.count("measured, 1 df") == 2 and "assumed" not in line
    assert any(text.startswith("calibration: trial #0 vllm-defaults deployed again: noise: ") for text in said.said)


def test_by_default_the_baseline_is_deployed_once_and_the_noise_stays_assumed(tmp_path):
    stand_in = StandIn()  # calibration is off by default (issue #46: it did not pay in the replay)
    study = run_in_memory(plan_of(tmp_path, trials=3), stand_in)
    assert stand_in.calls.count(("--tensor-parallel-size", "1")) == 1
    line = noise_line(study_data(study))
    assert "measured" not in line and "assumed" in line


@pytest.mark.parametrize(("flags", "calibrate"), [
    ((), False), (("--calibrate",), True), (("--no-calibrate",), False),
], ids=["default-off", "asked", "no-calibrate-still-accepted"])
def test_run_calibrates_only_when_asked(flags, calibrate):
    from autotune.cli import build_parser
    from autotune.cli.study import request_of

    args = build_parser().parse_args(["run", "--dry-run", *flags])
    assert request_of(args).calibrate is calibrate


def test_noise_is_inherited_by_a_study_of_the_same_model_and_not_by_another_models(tmp_path):
    storage, reads = InMemoryStorage(), []  # one storage, three studies
    run(plan_of(tmp_path, trials=1, name="first", calibrate=True), StandIn(), storage=storage)
    every_study = storage.get_all_studies  # what reading the other studies' spreads costs
    storage.get_all_studies = lambda: reads.append(1) or every_study()
    again = StandIn(seed=1)
    second = run(plan_of(tmp_path, trials=1, name="second"), again, storage=storage)
    assert len(again.calls) == 1  # inherited: no calibration needed
    assert len(reads) == 1  # once in the run, though the runner reads the study's data often
    line = noise_line(study_data(second))
    assert line.count("measured, 1 df") == 2 and "inherited from study 'first'" in line
    other = run(plan_of(tmp_path, trials=1, name="other", model="other-model", calibrate=False),
                StandIn(seed=2), storage=storage)
    assert "measured" not in noise_line(study_data(other))


def test_a_study_that_measured_only_the_baseline_says_keep_what_you_run(tmp_path):
    study = run_in_memory(plan_of(tmp_path, trials=1), StandIn())
    data = study_data(study)
    recs = recommend_each(data, ("interactive", "throughput", "balanced"), TieSettings("s", 0.05))
    text = "\n".join(recommendation_table(data, recs, "s"))
    assert "keep what you run (#0 vllm-defaults)" in text or "keep what you run" in text
    assert all(r.trial.number == 0 for r in recs)


@pytest.mark.parametrize(("trials", "budget_s", "trial_s", "random", "expected"), [
    (10, None, None, 2, 10),  # a quarter of --trials 10
    (40, None, None, 5, 40),  # at most 5, as the replay chose
    (10_000, 540.0, None, 2, 4),  # 9 minutes at the assumed 2 minutes a GPU trial: at least 2
    (10_000, 3600.0, 120.0, 5, 30),  # an hour at a measured 2 minutes
    (6, 3600.0, 120.0, 2, 6),  # --trials is the smaller bound
], ids=["trials-10", "trials-40", "9m-gpu", "1h-gpu", "trials-bound"])
def test_the_samplers_random_start_is_a_quarter_of_the_expected_trials_within_2_to_5(
        trials, budget_s, trial_s, random, expected):
    start = start_up(trials, budget_s=budget_s, trial_s=trial_s, platform="gpu")
    assert (start.random_trials, start.expected_trials) == (random, expected)


def test_the_runner_says_the_random_start_it_chose_from_the_budget(tmp_path):
    said = Said()
    run_in_memory(plan_of(tmp_path, trials=2, calibrate=False), StandIn(), progress=said)
    assert said.said[0].startswith("the sampler starts with 2 random trial(s): a quarter of the 2 "
                                   "expected (--trials 2)")
