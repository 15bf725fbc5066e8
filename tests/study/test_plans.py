"""The plan a study carries: one record from `run`'s flags to the study's storage and back,
read by every worker and resumed run; the study's state read and written in one place."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import optuna
import pytest

from autotune.core.plan.study_request import VERSION, StudyRequest
from autotune.core.trial.precision import Balance
from autotune.core.workload.profiles import get_profile
from autotune.errors import ConfigError, StudyError
from autotune.study.run.study_plan import build_plan, set_budget, store_plan, stored_request
from autotune.study.store.state import read_plan, start_clock, time_budget
from tests.helpers import ONE_PARAMETER_SPACE, request_in


def test_a_worker_rebuilds_the_plan_the_study_was_created_with(tmp_path):
    plan = build_plan(request_in(tmp_path))
    study = optuna.create_study(study_name="p")
    store_plan(study, plan)
    again = build_plan(stored_request(study, storage="sqlite://", workdir=tmp_path / "w", model=None,
                                      trials=None))
    assert again.space.parameters == plan.space.parameters and again.space.deployment == plan.space.deployment
    assert again.space.deployment.tensor_parallel_size == 1
    assert (again.bench, again.trials, again.max_model_len, again.slos, again.seed, again.objectives) == (
        plan.bench, 7, 4096, plan.slos, 11, plan.objectives)
    assert again.model == plan.model and again.workdir == tmp_path / "w"
    # The filled-in request is the stored one: a rebuild from it changes nothing.
    assert again.request == dataclasses.replace(plan.request, workdir=tmp_path / "w")
    assert stored_request(study, storage="sqlite://", workdir=tmp_path, model=None, trials=9).trials == 9
    set_budget(study, 12)  # `worker --trials 12`: the study-wide budget, in the plan
    assert (read_plan(study).trials, read_plan(study).model) == (12, plan.request.model)


def test_joining_a_study_with_another_shape_is_refused_naming_what_differs(tmp_path):
    study = optuna.create_study(study_name="p")
    store_plan(study, build_plan(request_in(tmp_path)))
    other = build_plan(request_in(tmp_path, max_model_len=8192))
    with pytest.raises(ConfigError, match="created with other settings \\(max_model_len differ"):
        store_plan(study, other)
    store_plan(study, build_plan(request_in(tmp_path, seed=3, trials=20)))  # not the shape: taken
    assert (read_plan(study).seed, read_plan(study).trials) == (3, 20)


def test_the_time_budget_is_the_plans_and_its_clock_the_runs(tmp_path):
    study = optuna.create_study(study_name="p")
    store_plan(study, build_plan(request_in(tmp_path, time_budget_s=1200.0)))
    assert time_budget(study) == (1200.0, 0.0)
    start_clock(study, 5000.0)
    assert time_budget(study) == (1200.0, 5000.0)


# The plan as autotune stored it before the budget, time budget and start-up timeout were in it
# (layout 1: written by commit cd4177e and earlier), with the budget attributes beside it.
LAYOUT1 = {
    "version": 1, "model": "/m", "space_path": "s.yaml", "space_yaml": ONE_PARAMETER_SPACE,
    "tensor_parallel_size": 2, "max_model_len": 4096,
    "profiles": [get_profile("low-concurrency").to_dict() | {"name": "low-concurrency"}],
    "objectives": ["low-concurrency:mean_e2el_ms:min"], "repeats": 2, "slos": [], "seed": 4,
    "sampler": "tpe", "confirm": 3, "race": False, "defaults": {"max_num_seqs": 8},
}


def test_a_study_stored_in_layout_1_is_read_with_its_budget_and_time_budget():
    study = optuna.create_study(study_name="old")
    for key, value in (("plan", LAYOUT1), ("budget", 12),
                       ("time_budget", {"seconds": 600.0, "started_at": 77.0})):
        study.set_user_attr(key, value)
    plan = read_plan(study)
    assert (plan.model, plan.tp, plan.trials, plan.time_budget_s, plan.seed, plan.runnable) == (
        "/m", 2, 12, 600.0, 4, True)
    assert plan.defaults == {"max_num_seqs": 8}  # read from the space's text
    assert plan.smallest_difference == 0.05  # stored by no older layout: the default
    assert time_budget(study) == (600.0, 77.0)
    unversioned = {k: v for k, v in LAYOUT1.items() if k not in ("version", "space_yaml")}
    imported = StudyRequest.from_dict(unversioned, "study 'i'")
    assert not imported.runnable and imported.imported_from == "/m"


def test_a_plan_round_trips_through_its_stored_layout(tmp_path):
    request = build_plan(request_in(tmp_path, race=True, time_budget_s=90.0,
                                    smallest_difference=0.1)).request
    stored = json.loads(json.dumps(request.to_dict()))  # as the storage keeps it
    assert stored["version"] == VERSION and "workdir" not in stored and "storage" not in stored
    back = StudyRequest.from_dict(stored, "study 'p'")
    assert back == dataclasses.replace(request, workdir=Path("."), storage=None, study_name=None)


@pytest.mark.parametrize("change, message", [
    ({"version": 4}, "study 'p': stored plan layout 4 is not one this autotune reads (1 to 3); "
                     "upgrade autotune"),
    ({"version": "2"}, "stored plan layout '2' is not one this autotune reads"),
    ({"profiles": None}, "study 'p': the stored plan is damaged (TypeError"),
    ({"repeats": "two"}, "the stored plan is damaged (TypeError: repeats must be int, got 'two')"),
    ({"race": 1}, "the stored plan is damaged (TypeError: race must be bool, got 1)"),
    ({"objectives": "a:b"}, "the stored plan is damaged (TypeError: objectives must be a list"),
    ({"profiles": [{"name": "x", "input_len": "long"}]},
     "study 'p': the stored plan is damaged (ConfigError: study 'p': profile 'x'"),
], ids=["newer-layout", "layout-not-a-number", "profiles-missing", "wrong-type", "bool-as-int",
        "objectives-not-a-list", "bad-profile"])
def test_a_stored_plan_of_another_layout_or_damaged_is_one_study_error(tmp_path, change, message):
    stored = {**build_plan(request_in(tmp_path)).request.to_dict(), **change}
    with pytest.raises(StudyError) as err:
        StudyRequest.from_dict(stored, "study 'p'")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_repeats_default_to_one_and_a_stored_plan_keeps_the_repeats_it_was_made_with(tmp_path):
    assert StudyRequest(profiles=()).repeats == 1  # the spread that matters is between deployments
    stored = build_plan(request_in(tmp_path, repeats=2)).request.to_dict()
    assert StudyRequest.from_dict(stored, "study 'p'").repeats == 2
    del stored["repeats"]  # a plan without the field was made when 2 was the default
    assert StudyRequest.from_dict(stored, "study 'p'").repeats == 2
    assert read_plan_of(LAYOUT1).repeats == 2


def read_plan_of(data: dict) -> StudyRequest:
    study = optuna.create_study()
    study.set_user_attr("plan", data)
    return read_plan(study)


def test_the_plans_platform_is_the_installed_one_unless_given_and_its_context_carries_it(
        tmp_path):
    from autotune.shell.server.install import detect_platform

    assert build_plan(request_in(tmp_path)).ctx.platform == detect_platform()
    for platform in ("cpu", "gpu"):
        plan = build_plan(request_in(tmp_path), platform=platform)
        assert plan.platform == plan.ctx.platform == platform
        (pinned,) = plan.bench.pinned.values()  # the runs stop by the platform's prior
        assert pinned.rule.balance == Balance.prior(platform)


def test_a_key_missing_from_a_stored_plan_takes_its_default(tmp_path):
    stored = build_plan(request_in(tmp_path)).request.to_dict()
    del stored["race"]
    assert StudyRequest.from_dict(stored, "study 'p'").race is False
    del stored["model"]
    with pytest.raises(StudyError, match="damaged \\(KeyError: 'model'\\)"):
        StudyRequest.from_dict(stored, "study 'p'")


def test_the_startup_timeout_is_the_plans_and_a_worker_or_resumed_run_takes_it_from_there(tmp_path):
    from autotune.cli import build_parser
    from autotune.cli.study import request_of
    from autotune.core.deployment.slots import Slot

    asked = request_of(build_parser().parse_args(["run", "--startup-timeout", "42"]))
    study = optuna.create_study(study_name="p")
    store_plan(study, build_plan(request_in(tmp_path, startup_timeout_s=asked.startup_timeout_s)))
    resumed = build_plan(stored_request(study, storage="sqlite://", workdir=tmp_path / "w", model=None,
                                        trials=None))
    setup = resumed.trial_setup(slot=Slot("cpu", (0,), 1), entrypoint=None, validator=None)
    assert (setup.startup_timeout_s, setup.workdir) == (42.0, tmp_path / "w")
    for command in (["worker", "--study", "p"], ["confirm", "--study", "p"]):  # no flag of their own
        with pytest.raises(SystemExit):
            build_parser().parse_args([*command, "--startup-timeout", "5"])


def test_a_run_that_joins_a_study_whose_data_file_changed_is_refused(tmp_path):
    from autotune.core.workload.profiles import DatasetSpec

    data = tmp_path / "reqs.jsonl"
    data.write_text('{"prompt_token_ids": [1, 2, 3], "output_len": 4}\n' * 8)
    chat = dataclasses.replace(get_profile("low-concurrency"), name="chat", num_prompts=4,
                               warmup_requests=1, dataset=DatasetSpec("jsonl", str(data)))
    study = optuna.create_study(study_name="p")
    store_plan(study, build_plan(request_in(tmp_path, profiles=(chat,), objectives=(), slos=())))
    data.write_text(data.read_text() + "\n")
    with pytest.raises(ConfigError, match="reqs.jsonl: its content changed since the study was created"):
        store_plan(study, build_plan(request_in(tmp_path, profiles=(chat,), objectives=(), slos=())))


def test_the_model_run_generates_fits_the_reference_space_without_yarn_and_has_its_own_folder(tmp_path):
    from autotune.core.space.search_space import inapplicable
    from autotune.shell.bench.files import read_space
    from autotune.study.run.study_plan import GENERATED_MODEL, model_context, model_info
    from tests.helpers import SPACES

    info = model_info(None, tmp_path, describe_only=True)  # what `run` would generate (CPU build)
    assert info.native_context == 131072 and info.name == str(tmp_path / GENERATED_MODEL)
    # A model generated by an older autotune at 32768 tokens lay in ...-trained-seed0: not reused.
    assert Path(GENERATED_MODEL).name != "tiny-moe-mtp-trained-seed0"
    space = read_space(SPACES / "reference.yaml")
    ctx = model_context(space, info)
    assert ctx.max_model_len == 81920 and "yarn" in inapplicable(space, ctx)
    assert list(tmp_path.iterdir()) == []


def test_a_study_stored_with_the_old_default_precision_resumes_at_the_balanced_length(tmp_path):
    """Before #40 every plan stored the 1.25% target: a `run` that gives no --precision joins
    such a study (and its runs go on at the balanced length); one that gives another target
    is refused as before."""
    study = optuna.create_study(study_name="p")
    store_plan(study, build_plan(request_in(tmp_path, precision=0.0125)))
    assert read_plan(study).precision == 0.0125
    store_plan(study, build_plan(request_in(tmp_path)))  # the new default: not refused
    assert read_plan(study).balanced and build_plan(request_in(tmp_path)).bench.pinned[
        "high-concurrency"].rule.balance is not None
    with pytest.raises(ConfigError, match="precision differ"):
        store_plan(study, build_plan(request_in(tmp_path, precision=0.02)))
