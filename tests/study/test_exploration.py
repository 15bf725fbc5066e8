"""The exploration order (core.space.exploration): what a study measures first after its
baseline, and that a better configuration one change from the baseline is found within the
first trials, on a synthetic truth (``OneChangeBetter``: a stand-in for vLLM through the
runner's trial-function seam, the truth known by construction)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autotune.core.deployment.baseline import VLLM_DEFAULTS
from autotune.core.plan.study_request import StudyRequest
from autotune.core.space.exploration import REFERENCE_STUDY, Candidate, exploration_order, objective_uses
from autotune.core.space.model_facts import parse_config
from autotune.core.space.search_space import ModelContext, fixed
from autotune.core.trial.outcome import Measurement, ProfileResult
from autotune.core.trial.precision import RunStop
from autotune.errors import ConfigError
from autotune.shell.bench.files import read_space
from autotune.study.run.study_plan import build_plan
from autotune.study.store.records import outcomes
from tests.helpers import GLM_MOE_MTP_CONFIG, SPACES, ids, run_in_memory

BASE = {"optimization_level": 2, "performance_mode": "balanced", "expert_parallel": False,
        "yarn": True, "mtp": False}  # vLLM's defaults at 81,920 tokens: YaRN fixed on


def test_the_order_is_each_change_expected_to_help_largest_first_then_those_changes_together():
    space = read_space(SPACES / "reference.yaml")
    ctx = ModelContext(parse_config("m", GLM_MOE_MTP_CONFIG), 81920, "gpu")
    order = exploration_order(space, ctx, {}, REFERENCE_STUDY)
    assert fixed(space, ctx) == {"yarn": True}
    assert [(c.changes, c.why) for c in order] == [
        ({"mtp": True}, "one change"),
        ({"optimization_level": 3}, "one change"),
        ({"expert_parallel": True}, "one change"),
        ({"mtp": True, "optimization_level": 3}, "the changes expected to help latency, together")]
    assert order[0] == Candidate({**BASE, "mtp": True}, {"mtp": True}, "one change",
                                 pytest.approx(1930.785 / 2505.243),
                                 pytest.approx(1663.330 / 1785.471))
    assert order[0].text == "mtp on (expected \u221222.9% latency, \u22126.8% throughput)"
    # -O0, -O1 and the performance modes are expected to help neither use: the sampler's.
    assert not any(c.changes.get("optimization_level") in (0, 1) or "performance_mode" in c.changes
                   for c in order)


def test_only_the_uses_the_objectives_ask_for_order_the_candidates():
    space = read_space(SPACES / "reference.yaml")
    ctx = ModelContext(parse_config("m", GLM_MOE_MTP_CONFIG), 81920, "gpu")
    assert objective_uses([("mean_e2el_ms", True)]) == ("latency",)
    assert objective_uses([("output_throughput", True)]) == ("latency",)  # minimized: not the use
    assert objective_uses([("output_throughput", False), ("p99_ttft_ms", True)]) == ("latency", "throughput")
    latency = exploration_order(space, ctx, {}, REFERENCE_STUDY, uses=("latency",))
    # expert parallel is expected to gain 0.5% throughput and lose 0.5% latency: left out
    assert [c.changes for c in latency] == [{"mtp": True}, {"optimization_level": 3},
                                            {"mtp": True, "optimization_level": 3}]
    throughput = exploration_order(space, ctx, {}, REFERENCE_STUDY, uses=("throughput",))
    assert [c.changes for c in throughput] == [{"expert_parallel": True}]


def test_a_model_without_mtp_gets_no_mtp_candidate_and_one_at_its_native_context_no_yarn():
    space = read_space(SPACES / "reference.yaml")
    dense = parse_config("d", {**GLM_MOE_MTP_CONFIG, "num_nextn_predict_layers": 0,
                               "n_routed_experts": 0})
    order = exploration_order(space, ModelContext(dense, 32768, "gpu"), {}, REFERENCE_STUDY)
    assert [c.changes for c in order] == [{"optimization_level": 3}]
    assert "yarn" not in order[0].params


class OneChangeBetter:
    """A trial function over a known truth: every configuration serves at 1000 ms and 1000 tok/s
    except ``better`` (one change from the baseline: MTP on), 10% faster on both; a spread of
    0.5% between runs."""

    def __init__(self, better: dict, seed: int = 0) -> None:
        self.better = better
        self.rng = np.random.default_rng(seed)
        self.deployed: list[tuple[str, ...]] = []

    def __call__(self, argv, bench, setup, on_phase) -> Measurement:
        self.deployed.append(tuple(argv))
        on_phase("benchmarking (stand-in)")
        good = self.is_better(argv)
        results = {}
        for p in bench.profiles:
            runs = []
            for _ in range(bench.repeats):
                tput = 1000.0 * (1.1 if good else 1.0) * math.exp(self.rng.normal(0, 0.005))
                runs.append({"output_throughput": tput, "mean_e2el_ms": 1e6 / tput,
                             "mean_ttft_ms": 50.0, "mean_tpot_ms": 5.0, "p99_ttft_ms": 80.0})
            stops = tuple(RunStop(p.num_prompts, "ceiling", p.max_concurrency, p.max_concurrency)
                          for _ in runs)
            results[p.name] = ProfileResult(p.name, tuple(runs), stops)
        return Measurement(results=results, startup_s=1.0, bench_s=0.1, wall_s=1.2,
                           vllm_version="stand-in", hardware="none")

    def is_better(self, argv) -> bool:
        words = " ".join(argv)
        return ("--speculative-config" in words and "--optimization-level 2" in words
                and "--performance-mode balanced" in words and "--enable-expert-parallel" not in words)


def study_of(tmp_path, exploration: str, seed: int = 1):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(GLM_MOE_MTP_CONFIG))
    plan = build_plan(StudyRequest(
        workdir=tmp_path / "studies", profiles=(ids("low-concurrency"), ids("high-concurrency")),
        model=str(model), space_path=str(SPACES / "reference.yaml"), tp=1, max_model_len=81920,
        trials=4, repeats=1, seed=seed, study_name=f"s-{exploration}-{seed}",
        baseline=VLLM_DEFAULTS, exploration=exploration, calibrate=False))
    truth = OneChangeBetter(BASE)
    study = run_in_memory(plan, truth)
    return [t for t in outcomes(study) if t.state == "complete"], truth


def test_a_configuration_10_percent_better_one_change_from_the_baseline_is_found_within_3_trials(
        tmp_path):
    found, truth = study_of(tmp_path, "order")
    assert found[0].reference == VLLM_DEFAULTS and not truth.is_better(found[0].argv)
    first_three = found[1:4]
    assert [t.failure for t in first_three] == [None] * 3  # none rejected: YaRN is fixed on
    assert truth.is_better(first_three[0].argv)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_sampler_alone_does_not_find_it_in_3_trials(tmp_path, seed):
    # What the order changes: with 24 configurations drawable here (expert parallel is not
    # drawn on CPU), TPE's random start finds the one better configuration in 3 draws rarely.
    found, truth = study_of(tmp_path, "sampler", seed)
    assert not any(truth.is_better(t.argv) for t in found[1:4])


def test_an_unknown_exploration_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match="^--exploration 'guess': valid: order, sampler$"):
        study_of(tmp_path, "guess")


def test_a_study_created_before_yarn_was_fixed_goes_on_drawing_it(tmp_path):
    # Optuna keeps a parameter's choices for the whole study: a study whose trials drew YaRN from
    # [false, true] cannot be offered [true] alone; it resumes as it was created.
    import optuna

    from autotune.study.run.study_setup import trial_flags

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GLM_MOE_MTP_CONFIG))
    plan = build_plan(StudyRequest(
        workdir=tmp_path, profiles=(ids("low-concurrency"),), model=str(model),
        space_path=str(SPACES / "reference.yaml"), tp=1, trials=3, seed=1, study_name="old"))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    old = study.ask()
    old.suggest_categorical("yarn", [False, True])
    study.tell(old, 1.0)
    params, argv = trial_flags(plan, study.ask(), None)
    assert params["yarn"] in (False, True) and ("--hf-overrides" in argv) is params["yarn"]
    fresh = optuna.create_study()
    assert trial_flags(plan, fresh.ask(), None)[0]["yarn"] is True
