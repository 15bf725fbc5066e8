"""The study layer above a single trial, fast: ask/tell, the budget, references, duplicates,
infeasible trials, SLOs, resume, interrupts, dead workers and confirmation.

The trial function is a stand-in passed through the runner's seam (``trial_fn``): it returns
measurements computed from the flags with seeded noise instead of deploying vLLM. What it
stands in for is tested against real deployments in test_study.py and test_deploy.py. The
studies live in Optuna's in-memory storage (the runner's ``storage`` seam) where what a storage
keeps is not under test; the first test reads the search ``copy_searched`` stores once through
SQLite as `autotune run` does, and dead workers need SQLite's heartbeats.
"""

from __future__ import annotations

import dataclasses
import math

import optuna
import pytest
from optuna.storages import InMemoryStorage
from optuna.trial import TrialState

from autotune.core.deployment import failures
from autotune.core.plan.study_request import StudyRequest
from autotune.core.trial.outcome import Measurement, ProfileResult
from autotune.core.workload.profiles import get_profile
from autotune.errors import ConfigError, StudyError, ValidationError
from autotune.study.run.confirm_rounds import confirm
from autotune.study.run.runner import SilentProgress, StudyRunner
from autotune.study.run.study_plan import build_plan
from autotune.study.run.study_setup import prepare_study
from autotune.study.run.trial_function import TrialSetup, run_trial
from autotune.study.store import optuna_internals
from autotune.study.store.records import outcomes, read_outcome, study_data, with_confirmed
from autotune.study.store.state import read_confirmed
from autotune.study.store.storage import Heartbeat
from tests.helpers import (
    Said,
    StandIn,
    StandInBench,
    StandInDeployment,
    age_heartbeats,
    copy_searched,
    ids,
    make_plan,
    o2_o3_plan,
    o3_is_o2,
    run,
    run_in_memory,
)


def test_a_study_runs_references_first_records_failures_and_stops_at_the_budget(tmp_path,
                                                                               built_once):
    # copy_searched: run(make_plan(tmp_path, trials=6), StandIn()), stored in SQLite
    _, study = copy_searched(built_once, tmp_path)  # read back
    found = outcomes(study)
    assert [t.reference for t in found[:3]] == ["base", "o0", "ep"]
    assert sum(t.state == "complete" for t in found) == 6
    assert study.metric_names == ["low-concurrency:mean_e2el_ms", "high-concurrency:output_throughput"]
    ep = found[2]
    assert ep.failure is failures.ENGINE_DIED and ep.log_tail == "segfault" and not ep.feasible
    # Told finite (the dashboard's axis never reads "inf"): the worst latency a served trial
    # told, infeasible by its constraint; the failure class stays in its attributes.
    worst = max(t.values[0] for t in study.trials[:2])
    assert study.trials[2].values == [worst, 0.0] and study.trials[2].constraints["served"] == 1.0
    base = found[0]
    assert base.feasible and len(base.results["low-concurrency"].runs) == 2
    assert study.trials[0].values[1] == pytest.approx(base.value("high-concurrency", "output_throughput"))


def test_a_configuration_that_failed_is_recorded_again_without_a_deployment(tmp_path):
    stand_in = StandIn()  # 8 configurations, 4 of them crash; random sampling meets one again
    found = outcomes(run_in_memory(make_plan(tmp_path, trials=12, sampler="random"), stand_in))
    copies = [t for t in found if t.failure is not None and t.duplicate_of is not None]
    assert copies and all(t.startup_s is None for t in copies)
    assert all(found[t.duplicate_of].argv == t.argv for t in copies)
    failed = {t.argv for t in found if t.failure is not None}
    assert failed and all(stand_in.calls.count(argv) == 1 for argv in failed)


def test_the_front_of_the_study_trades_interactive_latency_against_throughput_under_load(tmp_path):
    study = run_in_memory(make_plan(tmp_path, trials=8, references=False), StandIn(sd=0.01))
    front = study_data(study).front()
    assert {t.params["mtp"] for t in front} == {True, False}


def test_rerunning_resumes_without_enqueueing_references_again(tmp_path):
    storage = InMemoryStorage()
    run(make_plan(tmp_path, trials=3), StandIn(), storage=storage)
    study = run(make_plan(tmp_path, trials=5), StandIn(seed=1), storage=storage)
    found = outcomes(study)
    assert sum(t.state == "complete" for t in found) == 5
    assert sum(bool(t.reference) for t in found) == 3
    assert not study.get_trials(states=(TrialState.WAITING, TrialState.RUNNING))


def test_a_sample_identical_to_a_measured_trial_is_a_copy_told_to_the_sampler(tmp_path):
    # 2 x 2 applicable configurations without expert parallel crashes: the sampler repeats itself.
    stand_in = StandIn()
    study = run_in_memory(make_plan(tmp_path, trials=7, references=False), stand_in)
    copies = [t for t in map(read_outcome, study.trials) if t.same_engine_as is not None]
    assert copies and all(t.state == "complete" and t.startup_s is None for t in copies)
    for t in copies:  # the sampler learns the copied trial's values
        assert study.trials[t.number].values == study.trials[t.same_engine_as].values
    assert sum(t.state == "complete" for t in outcomes(study)) == 7  # copies are not trials
    assert not {t.number for t in copies} & {t.number for t in study_data(study).outcomes}


def test_two_flag_sets_that_resolve_to_one_engine_are_deployed_once(tmp_path):
    stand_in = StandIn()
    study = run_in_memory(o2_o3_plan(tmp_path, trials=2), stand_in, engine_id=o3_is_o2)
    o3 = read_outcome(study.trials[1])
    assert o3.params["optimization_level"] == 3 and o3.same_engine_as == 0
    assert study.trials[1].state == TrialState.COMPLETE
    assert study.trials[1].values == study.trials[0].values
    engines = [o3_is_o2(argv) for argv in stand_in.calls]
    assert len(stand_in.calls) == 2 and len(set(engines)) == 2  # the budget went to a new engine
    assert [t.number for t in outcomes(study)] == [0, max(t.number for t in study.trials)]


def test_a_reference_whose_engine_another_slot_is_measuring_waits_and_is_copied(tmp_path):
    """Another worker holds -O2 running; the reference -O3 (the same engine) waits for it
    instead of deploying it a second time, then takes its values. The other worker finishes
    while this one waits (its poll's sleep stands in for the time passing)."""
    from autotune.core.deployment.flags import to_argv
    from autotune.core.space.search_space import sample
    from autotune.core.trial.outcome import TrialOutcome
    from autotune.study.store.records import write_outcome

    plan, storage = o2_o3_plan(tmp_path, trials=2), InMemoryStorage()
    plan.workdir.mkdir(parents=True, exist_ok=True)
    study, _, _ = prepare_study(plan, Heartbeat(), storage)
    other = study.ask()  # the other slot's claim: the reference o2, enqueued first
    params = sample(plan.space, plan.ctx, other)
    argv = tuple(to_argv(plan.space, plan.ctx, params))
    write_outcome(other, TrialOutcome(other.number, state="running", params=params, argv=argv,
                                      engine=o3_is_o2(argv)))
    measured = StandIn()(argv, plan.bench, None, lambda phase: None)

    def other_slot_finishes(seconds):
        if study.get_trials(deepcopy=False)[other.number].state == TrialState.RUNNING:
            write_outcome(other, TrialOutcome(other.number, params=params, argv=argv,
                                              engine=o3_is_o2(argv), results=measured.results,
                                              trial_wall_s=1.0))
            study.tell(other, [measured.results["low-concurrency"].mean("mean_e2el_ms"),
                               measured.results["high-concurrency"].mean("output_throughput")])

    stand_in = StandIn()
    StudyRunner(plan, TrialSetup(model="", workdir=plan.workdir), trial_fn=stand_in,
                storage=storage, engine_id=o3_is_o2, poll_s=0.01, sleep=other_slot_finishes).work()
    o3 = next(t for t in map(read_outcome, study.trials) if t.params.get("optimization_level") == 3)
    assert o3.same_engine_as == other.number
    assert o3_is_o2(argv) not in [o3_is_o2(a) for a in stand_in.calls]  # never deployed twice


class CountingVllm:
    """A stand-in for vLLM's resolution (shell.server.validation.VllmValidator, tested in
    test_validation.py): each flag set resolves to an engine of its own, expert parallel is
    rejected; it counts how often it is asked, by the runner (``resolve``) or by a trial
    (``check``)."""

    REJECTED = "Expert parallelism needs more than one device"

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []

    def resolve(self, model: str, options) -> dict:
        self.asked.append(tuple(options))
        if "--enable-expert-parallel" in options:
            raise ValidationError(self.REJECTED)
        return {"argv": list(options)}

    def check(self, model: str, options) -> None:
        self.resolve(model, options)


def test_the_real_trial_takes_the_runners_verdict_so_vllm_is_asked_once_per_trial(tmp_path):
    plan = make_plan(tmp_path, trials=3)
    vllm = CountingVllm()
    setup = TrialSetup(model="", workdir=plan.workdir, validator=vllm, run_profile=StandInBench(),
                       deploy=lambda spec, on_phase: StandInDeployment(spec, on_phase))
    study = run_in_memory(plan, run_trial, setup=setup)  # run_trial, the real trial function
    found = outcomes(study)
    assert [t.reference for t in found[:3]] == ["base", "o0", "ep"]
    every = [read_outcome(t) for t in study.trials]  # copies of a measured engine included
    assert sorted(vllm.asked) == sorted(t.argv for t in every)  # once per trial, by the runner
    assert [t.failure for t in found[:3]] == [None, None, failures.CONFIG_REJECTED]
    assert found[2].failure_message == f"vLLM rejected the flags: {CountingVllm.REJECTED}"  # as alone


class RejectingAll(CountingVllm):
    """A stand-in for vLLM's resolution that rejects every flag set (a space of rejects)."""

    def resolve(self, model: str, options) -> dict:
        self.asked.append(tuple(options))
        raise ValidationError("max_model_len (81920) is greater than the derived max_model_len")


def _validated_run(tmp_path, trials: int, vllm: CountingVllm) -> tuple[optuna.Study, Said, list]:
    """The real trial function (run_trial) with a stand-in for vLLM's resolution, deployment
    and benchmark (test_trial.py's): what the runner counts, not what a deployment measures."""
    plan = make_plan(tmp_path, trials=trials)
    deployed: list = []

    def deploy(spec, on_phase):
        deployed.append(spec)
        return StandInDeployment(spec, on_phase)

    setup = TrialSetup(model="", workdir=plan.workdir, validator=vllm, run_profile=StandInBench(),
                       deploy=deploy)
    said = Said()
    return run_in_memory(plan, run_trial, setup=setup, progress=said), said, deployed


def test_a_configuration_vllm_rejects_costs_a_validation_not_one_of_the_trials(tmp_path):
    study, said, deployed = _validated_run(tmp_path, 3, CountingVllm())
    found = outcomes(study)
    rejected = [t for t in found if t.failure is failures.CONFIG_REJECTED]
    counted = [t for t in found if t.failure is not failures.CONFIG_REJECTED]
    assert rejected and found[2].reference == "ep"  # expert parallel: rejected by "vLLM"
    assert len(counted) == 3 and len(deployed) == 3  # the budget: three deployed trials
    assert all(t.startup_s is None for t in rejected)
    assert ("trial #2: rejected by vLLM, not deployed; not counted toward --trials (at most 3 x "
            "--trials trials in all)") in said.said
    last = said.said[-1]
    assert last.startswith("search stops after 0:00:") and last.endswith(
        f"the budget is met: 3 of 3 trial(s) finished, and {len(rejected)} rejected by vLLM "
        "(not counted)")


def test_a_space_of_rejects_ends_at_three_times_the_trials(tmp_path):
    study, said, deployed = _validated_run(tmp_path, 2, RejectingAll())
    found = outcomes(study)
    assert len(found) == 6 and deployed == []
    assert all(t.failure is failures.CONFIG_REJECTED for t in found)
    assert said.said[-1].endswith("6 trials ended, 6 of them rejected by vLLM: the cap of 3 x "
                                  "--trials (6) is reached with 0 of 2 counted")


def test_a_trial_past_its_slo_is_infeasible_with_its_measurements(tmp_path):
    plan = make_plan(tmp_path, trials=2, slos=["low-concurrency:p99_ttft_ms<=100"])
    study = run_in_memory(plan, StandIn())
    o0 = next(t for t in outcomes(study) if t.reference == "o0")  # -O0 doubles the p99 TTFT
    assert o0.failure is failures.SLO_VIOLATED and o0.results and not o0.feasible
    assert o0.slo_violations["low-concurrency:p99_ttft_ms<=100"] == pytest.approx(60.0)
    assert study.trials[o0.number].values[0] < math.inf  # measured values, not the failure's


@pytest.mark.parametrize("error, failure", [(KeyboardInterrupt, failures.INTERRUPTED),
                                            (ValueError, failures.INTERNAL_ERROR)],
                         ids=["ctrl-c", "bug"])
def test_an_exception_in_a_trial_fails_it_and_leaves_nothing_running(tmp_path, error, failure):
    def broken(argv, bench, setup, on_phase):
        raise error("boom")

    storage = InMemoryStorage()
    with pytest.raises(error):
        run(make_plan(tmp_path, trials=2), broken, storage=storage)
    study = optuna.load_study(study_name="s", storage=storage)
    (only,) = outcomes(study)
    assert only.state == "fail" and only.failure is failure
    assert not study.get_trials(states=(TrialState.RUNNING,))


class FailingNotByItsConfiguration(StandIn):
    """Fault injection: the first ``times`` deployments of -O0 fail as ``failure`` (a full disk,
    a bug of ours), the way run_trial reports them; every other deployment as ``StandIn``."""

    def __init__(self, failure, times: int) -> None:
        super().__init__()
        self.failure, self.left = failure, times

    def __call__(self, argv, bench, setup, on_phase) -> Measurement:
        if "0" in argv and self.left:
            self.calls.append(tuple(argv))
            self.left -= 1
            return Measurement(failure=self.failure,
                               failure_message="OSError: [Errno 28] No space left on device",
                               startup_s=1.0)
        return super().__call__(argv, bench, setup, on_phase)


def test_a_failure_that_is_not_the_configurations_is_run_once_more_and_not_held_against_it(tmp_path):
    stand_in, progress = FailingNotByItsConfiguration(failures.HOST_FAULT, times=1), Said()
    study = run_in_memory(make_plan(tmp_path, trials=3), stand_in, progress=progress)
    o0 = next(t for t in outcomes(study) if t.reference == "o0")
    assert o0.feasible and o0.failure is None and stand_in.calls.count(o0.argv) == 2
    assert study.trials[o0.number].constraints["served"] == 0.0
    assert any("host_fault" in s and "running it once more" in s for s in progress.said)


@pytest.mark.parametrize("failure", [failures.HOST_FAULT, failures.INTERNAL_ERROR],
                         ids=["the-machines", "ours"])
def test_a_second_failure_that_is_not_the_configurations_stops_the_study_with_one_line(tmp_path, failure):
    stand_in, storage = FailingNotByItsConfiguration(failure, times=2), InMemoryStorage()
    with pytest.raises(StudyError) as stopped:
        run(make_plan(tmp_path, trials=3), stand_in, storage=storage)
    message = str(stopped.value)
    assert "\n" not in message and message.startswith(
        f"trial #1 failed twice for a reason that is not its configuration's ({failure.name}: "
        "OSError: [Errno 28] No space left on device); the study stops: ")
    study = optuna.load_study(study_name="s", storage=storage)
    base, o0 = outcomes(study)
    assert base.feasible and (o0.state, o0.failure) == ("fail", failure)  # FAIL: no sampler learns from it
    assert stand_in.calls.count(o0.argv) == 2 and not study.trials[o0.number].constraints
    # Run again once the machine is fixed: -O0, drawn again, is deployed, not copied.
    study.enqueue_trial(o0.params)
    again = StandIn()
    found = outcomes(run(make_plan(tmp_path, trials=3), again, storage=storage))
    assert o0.argv in again.calls and any(t.argv == o0.argv and t.feasible for t in found)


def test_a_failure_an_older_autotune_held_against_a_configuration_is_not_copied(tmp_path):
    from autotune.core.deployment.flags import to_argv
    from autotune.core.space.search_space import sample
    from autotune.core.trial.outcome import TrialOutcome
    from autotune.study.store.records import write_outcome

    plan, storage = make_plan(tmp_path, trials=2, references=False), InMemoryStorage()
    plan.workdir.mkdir(parents=True)
    study, _, _ = prepare_study(plan, Heartbeat(), storage)
    old = study.ask()
    # Without expert parallel, which the stand-in crashes for the configuration's own reason.
    params = {**sample(plan.space, plan.ctx, old), "expert_parallel": False}
    argv = tuple(to_argv(plan.space, plan.ctx, params))
    write_outcome(old, TrialOutcome(old.number, params=params, argv=argv, failure=failures.INTERNAL_ERROR,
                                    failure_message="OSError: [Errno 28] No space left on device"))
    study.tell(old, [math.inf, 0.0])  # as an older autotune told it: infeasible
    study.enqueue_trial(params)
    stand_in = StandIn()
    found = outcomes(run(plan, stand_in, storage=storage))
    assert stand_in.calls[0] == argv and found[1].argv == argv
    assert found[1].feasible and found[1].duplicate_of is None


def test_a_dead_workers_trial_is_failed_and_run_again_by_a_live_one(tmp_path):
    heartbeat = Heartbeat(interval_s=1, grace_s=2, max_retry=1)
    plan = make_plan(tmp_path, trials=2, references=False)
    plan.workdir.mkdir(parents=True)
    study, _, _ = prepare_study(plan, heartbeat)
    dead = study.ask({"optimization_level": optuna.distributions.CategoricalDistribution([0, 2])})
    optuna_internals.record_heartbeat(study, dead)  # its worker then dies: no more heartbeats
    age_heartbeats(plan.workdir / "autotune.db", 3)  # 3 s ago, past the 2 s grace
    study = run(plan, StandIn(), heartbeat=heartbeat)
    found = outcomes(study)
    assert found[0].state == "fail" and found[0].failure is None  # lost, not failed by the trial
    assert any(t.retry_of == dead.number and t.state == "complete" for t in found)


def test_confirmation_redeploys_the_finalists_and_recommendations_use_its_numbers(tmp_path):
    plan = make_plan(tmp_path, trials=5)
    study = run_in_memory(plan, StandIn())
    stand_in = StandIn(seed=5)
    confirmed = confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=2, rounds=1,
                        trial_fn=stand_in, figures=False)
    front = study_data(study, confirmed=False).front()
    assert set(confirmed) >= {front[0].number, front[-1].number, 0}  # ends of the front, baseline
    assert len(stand_in.calls) == len(confirmed)
    assert read_confirmed(study) and all(len(r.runs) == 2 for by in read_confirmed(study).values()
                                         for r in by.values())
    data, search = study_data(study), study_data(study, confirmed=False)
    assert [t.number for t in data.outcomes] == [t.number for t in search.outcomes]  # none dropped
    for t, before in zip(data.outcomes, search.outcomes, strict=True):
        assert t.results == (with_confirmed(before.results, read_confirmed(study)[t.number])
                             if t.number in confirmed else before.results)
    # The report counts every trial and marks the confirmed ones; none is forgotten.
    from autotune.study.output.report_data import compute_report
    from autotune.study.output.report_render import report_sections

    report = compute_report(study)
    assert len(report.data.feasible) == len(search.feasible) and report.confirmed == set(confirmed)
    trials = next(sec for sec in report_sections(report) if sec.title == "Every trial").tables[0][1]
    assert len(trials) == len(search.outcomes)
    assert sum("(confirmed)" in row[0] for row in trials) == len(confirmed)


class CapacityStandIn(StandIn):
    """Fixed profiles as ``StandIn``; a capacity profile is searched by the real search
    (``core.trial.capacity_search.search``) over a synthetic p99 TTFT curve: -O2 carries
    about 4x the load of -O0. Records each search's incumbent."""

    def __init__(self) -> None:
        super().__init__(sd=0.01)
        self.incumbents: list = []
        self.searches: list = []

    def __call__(self, argv, bench, setup, on_phase) -> Measurement:
        from autotune.core.trial.capacity_search import Probe, search
        from autotune.study.run.trial_function import incumbent_for

        fixed = dataclasses.replace(bench, profiles=tuple(p for p in bench.profiles if not p.capacity))
        m = super().__call__(argv, fixed, setup, on_phase)
        level = argv[argv.index("--optimization-level") + 1] if "--optimization-level" in argv else "2"
        knee = 10.0 if level == "0" else 40.0  # vLLM's defaults set no level: -O2
        results, searches = dict(m.results), {}
        for p in (p for p in bench.profiles if p.capacity):
            around = bench.around.get(p.name)
            incumbent = None if around else incumbent_for(p, bench, results)
            self.incumbents.append(incumbent)
            found = search(p.name, p.capacity, lambda load, why, settle: Probe(load, {
                "p99_ttft_ms": 500.0 * (1 + (load / knee) ** 2), "output_throughput": 40.0 * load,
                "failed": 0.0}), incumbent, around)
            searches[p.name] = found
            self.searches.append(found)
            if found.boundary.found:
                results[p.name] = ProfileResult(p.name, tuple(found.runs_at_boundary()))
        return dataclasses.replace(m, results=results, capacity=searches)


def capacity_plan(tmp_path):
    plan = make_plan(tmp_path, trials=3, references=True, name="cap")
    return build_plan(StudyRequest(
        workdir=plan.workdir, profiles=(ids("low-concurrency"), ids("capacity")),
        model=plan.model.name, space_path=str(tmp_path / "space.yaml"),
        references_path=str(tmp_path / "refs.yaml"), trials=3, repeats=2, seed=1,
        study_name="cap", slos=("p99_ttft_ms<=2000",)))


def test_a_confirmation_reprobes_a_capacity_trials_boundary_instead_of_searching_again(tmp_path):
    from autotune.study.run.confirm_rounds import confirm

    plan = capacity_plan(tmp_path)
    study = run_in_memory(plan, CapacityStandIn())
    base = outcomes(study)[0]
    found = base.capacity["capacity"]
    again = CapacityStandIn()
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), trials=[base.number],
            rounds=1, trial_fn=again, figures=False)
    bounds = {found.boundary.load, found.boundary.fail_load}
    assert len(again.searches) == 1 and len(found.probes) > 2
    for s in again.searches:
        assert {p.load for p in s.probes} == bounds and s.boundary == dataclasses.replace(
            found.boundary, probes=len(s.probes), reason=s.boundary.reason)


def test_capacity_trials_carry_their_boundary_and_a_dominated_one_stops_at_the_incumbent_load(tmp_path):
    plan = capacity_plan(tmp_path)
    assert [o.name for o in plan.objectives] == ["low-concurrency:mean_e2el_ms", "capacity:output_throughput"]
    stand_in = CapacityStandIn()
    study = run_in_memory(plan, stand_in)
    base, o0, ep = outcomes(study)[:3]
    # -O2 meets p99 TTFT <= 2000 ms up to 40 x 3**0.5 = 69 concurrent requests.
    found = base.capacity["capacity"].boundary
    assert base.feasible and found.load <= 69 < found.fail_load
    assert study.trials[0].values[1] == pytest.approx(base.value("capacity", "output_throughput"))
    assert base.value("capacity", "capacity_load") == base.capacity["capacity"].boundary.load
    # -O0 is slower at low concurrency too, so the baseline is an incumbent for it: at the
    # baseline's load -O0 is far past the limit, its search ends after one probe.
    assert stand_in.incumbents[1].trial == 0
    below = o0.capacity["capacity"]
    assert below.boundary.below_incumbent == 0 and len(below.probes) == 1
    assert o0.served and not o0.feasible
    assert o0.status == "dominated" and base.status == "ok" and ep.status == "engine_died"
    assert o0.number not in [t.number for t in study_data(study).front()]
    assert study.trials[1].constraints["served"] == 0.0 and study.trials[1].values[1] == 0.0
    assert ep.failure is failures.ENGINE_DIED and "capacity" not in ep.capacity


def test_a_capacity_profile_without_an_slo_is_a_one_line_error(tmp_path):
    make_plan(tmp_path, trials=1)
    with pytest.raises(ConfigError, match="a capacity profile needs at least one SLO"):
        build_plan(StudyRequest(workdir=tmp_path / "studies", profiles=(ids("capacity"),),
                               model=str(tmp_path / "model"), space_path=str(tmp_path / "space.yaml")))


class Clock:
    """A wall clock that a stand-in trial advances: each trial costs ``trial_s``."""

    def __init__(self, trial_s: float) -> None:
        self.now, self.trial_s = 1_000_000.0, trial_s

    def __call__(self) -> float:
        return self.now


def test_a_time_budget_starts_no_trial_that_would_overrun_it_and_keeps_the_confirmation_in_reserve(
        tmp_path):
    from autotune.study.store.state import start_clock

    clock = Clock(trial_s=100.0)
    stand_in = StandIn()

    def costly(argv, bench, setup, on_phase):
        clock.now += clock.trial_s
        return stand_in(argv, bench, setup, on_phase)

    said: list[str] = []

    class Said(SilentProgress):
        def message(self, text: str) -> None:
            said.append(text)

    for finalists, budget, deployed in ((0, 450.0, 4), (1, 850.0, 6)):
        (tmp_path / f"c{finalists}").mkdir()
        plan = make_plan(tmp_path / f"c{finalists}", trials=100, references=False,
                         confirm=finalists, time_budget_s=budget)
        plan.workdir.mkdir(parents=True)
        storage = InMemoryStorage()
        study, _, _ = prepare_study(plan, Heartbeat(), storage)
        start = clock.now
        start_clock(study, start)
        StudyRunner(plan, TrialSetup(model="", workdir=plan.workdir), trial_fn=costly,
                    storage=storage, progress=Said(), clock=clock).work()
        # A deployment costs 100 s (a failure copied from an identical trial costs nothing).
        # confirm 0: 4 deployments fit 450 s; confirm 1: the 1 finalist (no baseline ran) is
        # in an open pair with a rival, and both sides are redeployed (``in_question``): 2 x
        # 100 s are kept, so 6 fit 850 s (the space holds 8 engines).
        assert clock.now - start == 100.0 * deployed, finalists
        launched = [t for t in outcomes(study) if t.state == "complete" and t.startup_s is not None]
        assert len(launched) == deployed and all(t.trial_wall_s == 100.0 for t in launched)
    assert said[-1].startswith("time budget: no new trial starts (time used 10 min of 14 min 10 s")
    assert "3 min 20 s kept for confirmation" in said[-1]


def test_with_racing_each_trial_races_against_the_front_so_far_and_a_raced_trial_is_stored(tmp_path):
    from autotune.core.trial.racing import beaten

    plan = make_plan(tmp_path, trials=4, race=True)  # base, o0, ep, one sampled
    stand_in = StandIn(sd=0.01)
    fronts: list[tuple[str, ...]] = []

    def racing(argv, bench, setup, on_phase):
        fronts.append(tuple(m.label for m in bench.race.front) if bench.race else ())
        measured = stand_in(argv, bench, setup, on_phase)
        why = beaten(bench.race, measured.results) if bench.race and measured.results else ""
        return dataclasses.replace(measured, raced=why)

    found = outcomes(run_in_memory(plan, racing))
    assert fronts[:2] == [(), ("#0 base",)]  # the first trial has nothing to race
    o0 = found[1]
    assert o0.reference == "o0" and o0.raced.startswith("beaten by #0 base beyond the noise")
    assert o0.status == "raced" and o0.feasible and o0 not in study_data_of(found).front()


def study_data_of(found):
    from autotune.core.analysis.study_data import StudyData, noise_of
    from autotune.core.trial.objectives import default_objectives

    objectives = default_objectives((get_profile("low-concurrency"), get_profile("high-concurrency")))
    return StudyData(tuple(found), objectives, noise_of(found))


OPT_LEVEL_SPACE = """
name: opt-level
deployment: {tensor_parallel_size: 1, max_model_len: 4096}
parameters:
  - {name: optimization_level, type: categorical, choices: [2, 3], default: 2, flag: --optimization-level}
"""


def test_a_one_engine_space_costs_one_deployment_and_shows_one_trial(tmp_path):
    from autotune.core.analysis.recommendation import USES, recommend

    stand_in, said = StandIn(), Said()
    study = run_in_memory(o2_o3_plan(tmp_path, trials=10, space=OPT_LEVEL_SPACE), stand_in,
                          engine_id=o3_is_o2, progress=said)
    assert len(stand_in.calls) == 1  # -O3 is -O2's engine: a copy, and nothing else to draw
    assert said.said[-1] == "search stops: all 1 distinct engine(s) of the space are measured"
    data = study_data(study)
    assert [t.number for t in data.outcomes] == [0] and [t.number for t in data.front()] == [0]
    assert all(recommend(data, use).tied == () for use in USES)


WIDE_SPACE = """
name: wide
deployment: {tensor_parallel_size: 1, max_model_len: 4096}
parameters:
  - {name: optimization_level, type: categorical, choices: [0, 2], default: 2, flag: --optimization-level}
  - {name: max_num_seqs, type: int, low: 1, high: 1000, default: 8, flag: --max-num-seqs}
"""


def test_a_sampler_that_draws_only_measured_engines_stops_the_search_without_a_second_deployment(
        tmp_path):
    from autotune.study.run.runner import MAX_RESAMPLES

    # 2000 configurations that vLLM resolves to one engine (a stand-in for its resolution):
    # the space is not exhausted, but every draw after the first is the engine measured.
    stand_in, said = StandIn(), Said()
    study = run_in_memory(make_plan(tmp_path, trials=50, references=False, space=WIDE_SPACE),
                          stand_in, engine_id=lambda argv: "the one engine", progress=said)
    assert len(stand_in.calls) == 1
    copies = [t for t in map(read_outcome, study.trials) if t.same_engine_as == 0]
    assert len(copies) == MAX_RESAMPLES and len(study_data(study).outcomes) == 1
    assert said.said[-1] == (f"search stops: the sampler drew only measured engines "
                              f"{MAX_RESAMPLES} times in a row: the search has converged")


def test_a_budgeted_study_ends_within_its_budget_confirmation_included(tmp_path):
    """Every deployment costs 100 s of a fake clock. The first trial starts with no estimate;
    after it, the search keeps in reserve one redeployment of each finalist whose verdict is in
    question (none while every answer is decided), and the confirmation deploys only those:
    the study never passes its budget and never ends with a whole deployment's time unused."""
    from autotune.study.store.state import start_clock

    clock = Clock(trial_s=100.0)
    stand_in = StandIn()

    def costly(argv, bench, setup, on_phase):
        clock.now += clock.trial_s
        return stand_in(argv, bench, setup, on_phase)

    for budget in (150.0, 250.0, 550.0):
        where = tmp_path / f"b{int(budget)}"
        where.mkdir()
        plan = make_plan(where, trials=100, references=False, confirm=1, time_budget_s=budget)
        plan.workdir.mkdir(parents=True)
        storage = InMemoryStorage()
        study, _, _ = prepare_study(plan, Heartbeat(), storage)
        start = clock.now
        start_clock(study, start)
        setup = TrialSetup(model="", workdir=plan.workdir)
        StudyRunner(plan, setup, trial_fn=costly, storage=storage, clock=clock).work()
        said: list[str] = []
        confirm(study, plan, setup, k=1, trial_fn=costly, say=said.append,
                budget_end=start + budget, clock=clock, only_open=True, figures=False)
        used = clock.now - start
        assert used <= budget and budget - used < 100.0, (budget, used, said)


def test_deployments_that_crash_before_any_is_served_still_price_the_next_trial(tmp_path):
    """Every deployment dies at its first completion after 100 s of a fake clock. The first
    starts with no estimate; the next ones are priced at what the crashes cost, so a 250 s
    budget holds two of them, not three."""
    from autotune.study.store.state import start_clock

    clock = Clock(trial_s=100.0)

    def crashing(argv, bench, setup, on_phase):
        clock.now += clock.trial_s
        return Measurement(failure=failures.ENGINE_DIED, failure_message="worker died",
                           startup_s=60.0)

    plan = make_plan(tmp_path, trials=100, references=False, confirm=0, time_budget_s=250.0)
    plan.workdir.mkdir(parents=True)
    storage = InMemoryStorage()
    study, _, _ = prepare_study(plan, Heartbeat(), storage)
    start = clock.now
    start_clock(study, start)
    StudyRunner(plan, TrialSetup(model="", workdir=plan.workdir), trial_fn=crashing,
                storage=storage, clock=clock).work()
    assert clock.now - start == 200.0


@pytest.mark.parametrize("budget_s", [1800.0, 3600.0])
def test_a_budgeted_study_on_recorded_timings_ends_within_its_budget_confirmation_included(
        tmp_path, budget_s):
    """The recorded CPU table replayed (``study.dev.replay``: a stand-in that charges a device
    clock the recorded start-up, runs and teardown of each deployment), with --confirm 2.
    A budget is kept in expectation only: at 900 s this replay's first served trial costs
    406 s and its confirmation deployment, drawing slower recorded runs, 591 s, ending at
    1009 s; at 300 s the first served trial alone, which nothing predicts, passes it."""
    from autotune.core.workload.profiles import ProfileOverrides
    from autotune.study.dev.replay import DeviceClock, Replay
    from autotune.study.store.state import start_clock
    from tests.helpers import DATA, SPACES, TABLE

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text((DATA / "model-config.json").read_text())
    plan = build_plan(StudyRequest(
        workdir=tmp_path, profiles=tuple(get_profile(p, ProfileOverrides(token_ids=True))
                                         for p in TABLE.profiles),
        model=str(model), space_path=str(SPACES / "reference.yaml"), trials=10_000, repeats=2,
        seed=1, study_name="replay", storage=f"sqlite:///{tmp_path}/replay.db", confirm=2,
        time_budget_s=budget_s))
    storage = InMemoryStorage()
    study, _, _ = prepare_study(plan, Heartbeat(), storage)
    clock = DeviceClock()
    start_clock(study, clock.now)
    replay = Replay(TABLE, plan.space, plan.ctx, 1, clock)
    setup = TrialSetup(model="", workdir=plan.workdir)
    StudyRunner(plan, setup, trial_fn=replay, storage=storage, poll_s=0.01, clock=clock).work()
    said: list[str] = []
    confirm(study, plan, setup, k=2, trial_fn=replay, say=said.append, budget_end=budget_s,
            clock=clock, figures=False)
    assert clock.now <= budget_s
    assert said[0].startswith(("confirmation: ", "confirmation shrunk", "confirmation skipped"))


class RecordingBalance(StandIn):
    """The stand-in trial function, recording the balance each trial's low-concurrency runs
    were given (the runner's wiring above a trial is what is under test)."""

    def __init__(self) -> None:
        super().__init__()
        self.balances: list = []

    def __call__(self, argv, bench, setup, on_phase) -> Measurement:
        self.balances.append(bench.pinned["low-concurrency"].rule.balance)
        return super().__call__(argv, bench, setup, on_phase)


def test_each_trial_runs_at_the_balance_of_what_the_study_measured_before_it(tmp_path):
    """Before any served trial the plan's priors; after one, its measured deployment cost."""
    from autotune.core.plan.confirmation import deployment_cost_s

    stand_in = RecordingBalance()
    plan = make_plan(tmp_path, trials=3)
    study = run_in_memory(plan, stand_in)
    prior = plan.bench.pinned["low-concurrency"].rule.balance
    assert prior is not None and stand_in.balances[0] == prior
    first = deployment_cost_s(outcomes(study)[:1], again=True)  # the baseline's wall
    assert first is not None and stand_in.balances[1] == dataclasses.replace(prior, deployment_s=first)
