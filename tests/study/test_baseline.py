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
from autotune.core.analysis.recommend import TieSettings, recommend_each
from autotune.core.analysis.recommend import table as recommendation_table
from autotune.core.analysis.study_data import noise_line
from autotune.core.deployment.flags import to_argv
from autotune.core.deployment.from_flags import (
    VLLM_DEFAULTS,
    argv_to_options,
    baseline_of_options,
    defaults_baseline,
)
from autotune.core.plan.budget import start_up
from autotune.core.plan.request import PlanRequest
from autotune.core.space.model_facts import parse_config
from autotune.core.space.search_space import ModelContext
from autotune.core.space.space_yaml import parse_space
from autotune.errors import ConfigError
from autotune.study.output.export import Export
from autotune.study.run.creation import dry_run_argv
from autotune.study.run.planning import build_plan
from autotune.study.store.records import outcomes, study_data
from tests.conftest import GLM_MOE_MTP_CONFIG
from tests.helpers import REFERENCES, SPACE, Said, StandIn, ids, run, run_in_memory

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
            references: bool = False, **settings):
    folder = files(tmp_path, model=model)
    return build_plan(PlanRequest(
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
def test_what_export_writes_parses_back_to_the_same_parameters(form):
    import yaml

    space, ctx = ctx_of(SPACE, 4096)
    params = {"optimization_level": 0, "mtp": True, "expert_parallel": True}
    text = Export(3, "m", to_argv(space, ctx, params)).render(form)
    if form == "shell":
        options = argv_to_options(shlex.split(text)[3:], "f")
    else:
        data = yaml.safe_load(text)
        data = data["config"] if form == "json" else data
        options = {f"--{k}": v for k, v in data.items()}
    b = baseline_of_options(space, ctx, options, name="f", where="f")
    assert b.params == params and b.max_model_len == 4096


def test_flags_the_space_cannot_express_are_one_error_naming_each():
    space, ctx = ctx_of(SPACE, 4096)
    options = argv_to_options(shlex.split("--max-num-seqs 128 --enable-chunked-prefill -O0"), "x")
    with pytest.raises(ConfigError) as err:
        baseline_of_options(space, ctx, options, name="x", where="--baseline x")
    message = str(err.value)
    assert "\n" not in message and "--max-num-seqs 128" in message
    assert "--enable-chunked-prefill" in message and "optimization" not in message.split(":")[-2]


def test_a_value_outside_the_parameters_domain_is_an_error():
    space, ctx = ctx_of(SPACE, 4096)
    with pytest.raises(ConfigError, match="--optimization-level 3 .*one of 0, 2"):
        baseline_of_options(space, ctx, {"--optimization-level": 3}, name="x", where="x")


def test_a_config_file_in_the_baseline_is_refused_not_dropped():
    """`--config FILE` holds settings the baseline would silently lose: it is named as a flag
    the space cannot express, not ignored as the runner's own flags are."""
    space, ctx = ctx_of(SPACE, 4096)
    options = argv_to_options(["--config", "mine.yaml", "--port", "8000"], "x")
    with pytest.raises(ConfigError, match="--config mine.yaml"):
        baseline_of_options(space, ctx, options, name="x", where="--baseline x")


def test_values_read_back_as_numbers_only_where_they_are_numbers():
    options = argv_to_options(["--kv-cache-dtype", "nan", "--max-num-seqs", "128",
                               "--gpu-memory-utilization", "0.9"], "x")
    assert options == {"--kv-cache-dtype": "nan", "--max-num-seqs": 128,
                       "--gpu-memory-utilization": 0.9}


@pytest.mark.parametrize(("given", "hidden"), [
    ("-O0 --api-key sk-secret", "-O0 --api-key ***"),
    ("-O0 --api-key=sk-secret", "-O0 --api-key=***")])
def test_a_pasted_api_key_is_never_echoed(tmp_path, capsys, given, hidden):
    folder = files(tmp_path)
    code = main(["--workdir", str(tmp_path / "studies"), "run", "--model", str(folder),
                 "--space", str(tmp_path / "space.yaml"), "--baseline", given + " --max-num-seqs 8"])
    err = capsys.readouterr().err
    assert code == 2 and "sk-secret" not in err and hidden in err


def test_an_unbalanced_quote_in_the_baseline_is_one_line_exit_2(tmp_path, capsys):
    folder = files(tmp_path)
    code = main(["--workdir", str(tmp_path / "studies"), "run", "--model", str(folder),
                 "--space", str(tmp_path / "space.yaml"), "--baseline", "--max-num-seqs '128"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--baseline" in err


# --- through the runner (stand-in trial function) ----------------------------------------------

def test_the_baseline_is_the_first_trial_before_the_references_and_every_verdict_compares_with_it(
        tmp_path):
    stand_in = StandIn()
    study = run_in_memory(plan_of(tmp_path, trials=4, references=True, calibrate=False), stand_in)
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


def test_the_dry_run_shows_the_baseline_first(tmp_path):
    shown = dry_run_argv(plan_of(tmp_path, trials=3, references=True), 3)
    assert shown[0] == ("trial 0 (baseline: vllm-defaults)", ["--tensor-parallel-size", "1"])
    assert shown[1][0] == "trial 1 (base)"


@pytest.mark.parametrize("form", ["reference", "flags", "file"])
def test_baseline_given_as_a_reference_name_flags_or_an_exported_file(tmp_path, form):
    files(tmp_path)
    export = tmp_path / "mine.yaml"
    export.write_text("# autotune: trial 3\nmodel: m\ntensor-parallel-size: 1\n"
                      "max-model-len: 4096\noptimization-level: 0\n")
    given = {"reference": "o0", "flags": "--optimization-level 0 --max-model-len 4096",
             "file": str(export)}[form]
    stand_in = StandIn()
    study = run_in_memory(plan_of(tmp_path, trials=1, baseline=given, calibrate=False), stand_in)
    first = outcomes(study)[0]
    assert first.params["optimization_level"] == 0 and first.reference
    assert study_data(study).baseline.number == 0
    assert "--optimization-level" in stand_in.calls[0] and "--max-model-len" in stand_in.calls[0]


def test_an_unknown_baseline_flag_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    folder = files(tmp_path)
    workdir = tmp_path / "studies"
    code = main(["--workdir", str(workdir), "run", "--model", str(folder), "--space",
                 str(tmp_path / "space.yaml"), "--baseline", "--max-num-seqs 128"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--max-num-seqs 128" in err
    assert not workdir.exists()


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
