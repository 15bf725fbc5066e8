"""Device time spent where it decides (issue #46 item 4): a first trial's runs are short
before the spread is known, only a pick whose verdict is in question is confirmed, a study of
the baseline alone neither calibrates nor confirms, and the budget prices the next trial on a
warm machine. Through the runner's seams with the stand-ins of tests/helpers.py (no vLLM); the
run lengths on synthetic requests of known spread."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from optuna.storages import InMemoryStorage

from autotune.core.deployment.baseline import VLLM_DEFAULTS
from autotune.core.metrics.summary import RequestResult
from autotune.core.plan.budget import expected_trial_s, redeployment_start_s
from autotune.core.plan.confirmation import deployment_cost_s, in_question
from autotune.core.plan.study_request import StudyRequest
from autotune.core.trial.outcome import TrialOutcome
from autotune.core.trial.precision import BALANCED, PRECISE, Balance, StopRule, recheck
from autotune.study.run.confirm_rounds import confirm
from autotune.study.run.runner import StudyRunner
from autotune.study.run.study_plan import build_plan
from autotune.study.run.study_setup import prepare_study
from autotune.study.run.trial_function import TrialSetup
from autotune.study.store.records import outcomes, study_data
from autotune.study.store.state import read_confirmed, start_clock
from autotune.study.store.storage import Heartbeat
from tests.helpers import MtpDoesNothing, StandIn, copy_tied, ids, make_plan, run_in_memory
from tests.study.test_runner import CapacityStandIn, Clock

# ---------------------------------------------------------------- run length


def requests(within_sd: float, count: int, *, concurrency: int = 2, seed: int = 0,
             latency_s: float = 1.0) -> list[RequestResult]:
    """``count`` requests sent ``concurrency`` at a time, each taking a log-normal latency of
    relative spread ``within_sd`` around ``latency_s``: sigma_w is known."""
    rng = np.random.default_rng(seed)
    free = [0.0] * concurrency
    out = []
    for _ in range(count):
        slot = min(range(concurrency), key=lambda k: free[k])
        start = free[slot]
        took = latency_s * math.exp(rng.normal(0.0, within_sd))
        free[slot] = start + took
        out.append(RequestResult(prompt_len=8, start_s=start, success=True, output_tokens=100,
                                 ttft_s=0.05, latency_s=took, done_s=start + took))
    return out


def test_the_run_stops_at_the_precision_length_where_it_is_shorter_than_the_balanced_one():
    # sigma_w 8%, the GPU's prior sigma_b 1%, C_d 100 s, c_r 0.5 s: n* = 8 x sqrt(200) = 113;
    # a 95% half-width of 2.5% (half of a 5% smallest difference) takes (1.96 x 8 / 2.5)^2 = 39.
    records = requests(0.08, 200)
    balance = Balance(0.01, 100.0)
    shorter = recheck(records, StopRule(balance=balance, enough_rel=0.025),
                      metrics=("mean_e2el_ms",), concurrency=2, ceiling=200)
    balanced = recheck(records, StopRule(balance=balance), metrics=("mean_e2el_ms",),
                       concurrency=2, ceiling=200)
    assert shorter.reason == PRECISE and 30 <= shorter.requests <= 55
    assert balanced.reason == BALANCED and 95 <= balanced.requests <= 135


def test_the_run_stops_at_the_balanced_length_where_it_is_the_shorter():
    # On CPU (sigma_b 20%) n* = 0.4 x sqrt(180) = 5: the floor of 10, long before 39 requests.
    records = requests(0.08, 200)
    rule = StopRule(balance=Balance(0.20, 90.0), enough_rel=0.025)
    stop = recheck(records, rule, metrics=("mean_e2el_ms",), concurrency=2, ceiling=200)
    assert (stop.requests, stop.reason) == (10, BALANCED)


def test_a_first_trial_with_unknown_spread_runs_the_short_length(tmp_path):
    """On a GPU, before anything is measured, the first trial's runs stop by the prior (1%
    between deployments) and the precision length, not at the ceiling."""
    seen = []

    def recording(argv, bench, setup, on_phase):
        seen.append(bench.pinned["low-concurrency"])
        return StandIn()(argv, bench, setup, on_phase)

    run_in_memory(make_plan(tmp_path, trials=1, references=False, platform="gpu"), recording)
    (first,) = seen
    assert first.rule.balance == Balance(0.01, 100.0) and first.rule.enough_rel == 0.025
    stop = recheck(requests(0.08, 100), first.rule, metrics=first.metrics, concurrency=2,
                   ceiling=100)
    assert stop.reason == PRECISE and stop.requests <= 55  # not the 100 of the ceiling


# ---------------------------------------------------------------- confirmation


def tied(tmp_path, built_once, smallest_difference: float):
    """``copy_tied``'s study and each of its trials' flags, by number."""
    plan, study, _ = copy_tied(tmp_path, built_once, smallest_difference)
    return plan, study, {t.number: t.argv for t in outcomes(study)}


def test_a_pick_already_decided_or_equivalent_is_not_confirmed(tmp_path, built_once):
    plan, study, _ = tied(tmp_path, built_once, smallest_difference=0.5)  # within 50%: equivalent
    again, said = MtpDoesNothing(seed=3), []
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=3, trial_fn=again,
            say=said.append, only_open=True, figures=False)
    assert again.deployed == [] and not read_confirmed(study)
    assert said[0] == ("confirmation: not needed, every use's answer is decided or equivalent "
                       "against the baseline and its rivals (interactive, throughput, balanced)")


def test_an_undecided_pick_is_confirmed_and_a_decided_trial_is_not(tmp_path, built_once):
    plan, study, argv = tied(tmp_path, built_once, smallest_difference=0.01)  # MTP changes nothing: open
    base, mtp, o0 = sorted(argv)
    again, said = MtpDoesNothing(seed=3), []
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=3, trial_fn=again,
            say=said.append, only_open=True, figures=False)
    deployed = set(again.deployed)
    assert {argv[base], argv[mtp]} <= deployed and argv[o0] not in deployed
    assert said[0] == f"1 comparison(s) undecided: confirming #{mtp}, #{base}"


@pytest.mark.parametrize("finalist", ["pick", "baseline"])
def test_an_open_pair_with_one_finalist_is_redeployed_whole(tmp_path, built_once, finalist):
    """A pair still undecided (here the MTP pick against the baseline) is redeployed on both
    sides where only one of them is a finalist: half a pair's redeployments decide nothing."""
    _, study, argv = tied(tmp_path, built_once, smallest_difference=0.01)
    base, mtp, _ = sorted(argv)
    one = {"pick": mtp, "baseline": base}[finalist]
    other = base if one == mtp else mtp
    chosen, said = in_question(study_data(study), [one])
    assert chosen == [one, other]
    assert said == f"1 comparison(s) undecided: confirming #{one}, #{other}"


def test_a_baseline_only_capacity_study_neither_calibrates_nor_confirms(tmp_path):
    """Issue #46: a `--trials 1` capacity study deployed its only configuration three times
    (its search, a calibration, a confirmation). Now once."""
    make_plan(tmp_path, trials=1)  # writes the model and space
    plan = build_plan(StudyRequest(
        workdir=tmp_path / "studies", profiles=(ids("low-concurrency"), ids("capacity")),
        model=str(tmp_path / "model"), space_path=str(tmp_path / "space.yaml"), trials=1,
        repeats=2, seed=1, study_name="cap", slos=("p99_ttft_ms<=2000",),
        baseline=VLLM_DEFAULTS))
    stand_in = CapacityStandIn()
    study = run_in_memory(plan, stand_in)
    said: list[str] = []
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=plan.confirm,
            trial_fn=stand_in, say=said.append, only_open=True, figures=False)
    assert len(stand_in.searches) == 1 and [t.number for t in outcomes(study)] == [0]
    assert study_data(study).baseline.number == 0 and not read_confirmed(study)
    assert said[0].startswith("confirmation: not needed")


# ---------------------------------------------------------------- budget


def served_trial(number: int, *, wall_s: float, startup_s: float, **phases: float) -> TrialOutcome:
    from tests.helpers import served

    return dataclasses.replace(served(e2el_ms=100.0, throughput=10.0), number=number,
                               trial_wall_s=wall_s, startup_s=startup_s, startup_phases=phases)


@pytest.mark.parametrize(("trials", "expected"), [
    ([], None),
    # the first alone: its start less its kernel JIT (23 s), then its runs and teardown
    ([served_trial(0, wall_s=140.0, startup_s=53.0, jit_s=23.0)], 30.0 + 87.0),
    # later trials: their median start and their runs; the first's cold 140 s prices nothing
    ([served_trial(0, wall_s=140.0, startup_s=53.0, jit_s=23.0),
      served_trial(1, wall_s=59.0, startup_s=30.0)], 59.0),
], ids=["none", "first-alone", "after-the-first"])
def test_the_next_trial_is_priced_on_a_warm_machine(trials, expected):
    assert expected_trial_s(trials) == expected


def test_a_redeployment_is_priced_from_the_same_trials_less_the_same_compile_seconds():
    """A redeployment's start (``redeployment_start_s``) and its wall (``deployment_cost_s``)
    learn from the same trials: a raced trial (its runs cut short) prices neither, and each
    measured trial gives back the compile seconds it spent filling the cache."""
    miss = {"compile_s": 29.0, "compile_cache": "miss"}
    measured = served_trial(0, wall_s=100.0, startup_s=75.0, **miss)
    raced = dataclasses.replace(served_trial(1, wall_s=300.0, startup_s=200.0, **miss),
                                raced="beaten beyond the noise")
    assert redeployment_start_s([measured, raced]) == 75.0 - 29.0
    assert deployment_cost_s([measured, raced], again=True) == 100.0 - 29.0


def test_the_budget_starts_another_trial_when_one_fits_after_a_cold_first_start(tmp_path):
    """The first deployment takes 140 s (a 53 s cold start, 23 s of it kernel JIT), every
    later one 59 s (a 30 s start). In 290 s: three trials (140 + 59 + 59 = 258), ending with
    32 s left, less than one trial; pricing by the mean wall (99.5 s after two) stopped at 199 s
    with 91 s left."""
    from autotune.core.trial.outcome import Measurement

    clock, stand_in, walls = Clock(trial_s=0.0), StandIn(), []

    def cold_then_warm(argv, bench, setup, on_phase):
        first = not walls
        walls.append(140.0 if first else 59.0)
        clock.now += walls[-1]
        served_argv = [a for a in argv if a != "--enable-expert-parallel"]  # every trial served
        m: Measurement = stand_in(served_argv, bench, setup, on_phase)
        return dataclasses.replace(m, startup_s=53.0 if first else 30.0,
                                   startup_phases={"jit_s": 23.0} if first else {})

    plan = make_plan(tmp_path, trials=100, references=False, confirm=0, time_budget_s=290.0)
    plan.workdir.mkdir(parents=True)
    storage = InMemoryStorage()
    study, _, _ = prepare_study(plan, Heartbeat(), storage)
    start_clock(study, clock.now)
    began = clock.now
    StudyRunner(plan, TrialSetup(model="", workdir=plan.workdir), trial_fn=cold_then_warm,
                storage=storage, clock=clock).work()
    assert walls == [140.0, 59.0, 59.0]
    assert 290.0 - (clock.now - began) < 59.0


def test_a_run_stops_at_a_whole_wave_once_the_budget_leaves_it_no_more_seconds():
    from autotune.core.trial.precision import BUDGET, Pinned

    records = requests(0.08, 200)  # 1 s a request, 2 at a time: about 2 requests a second
    pin = Pinned(StopRule(balance=Balance(0.01, 100.0)), ("mean_e2el_ms",), max_run_s=8.0)

    def asked(p: Pinned) -> tuple[int, str]:  # at each whole wave, as the client asks
        for k in range(2, len(records), 2):
            why = p.stop(records[:k], sent=k, concurrency=2, ceiling=200,
                         elapsed_s=records[k - 1].done_s)
            if why:
                return k, why
        return len(records), ""

    k, why = asked(pin)
    assert why == BUDGET and records[k - 1].done_s >= 8.0 > records[k - 3].done_s
    assert asked(dataclasses.replace(pin, max_run_s=None))[1] == BALANCED  # later: n* 113


def test_a_trials_runs_share_what_the_budget_leaves_after_its_start(tmp_path):
    """The cold/warm study above: before the third trial 91 s are left (290 - 199), less a
    warm start of 30 s, shared by its 4 fixed runs (2 profiles x 2 repeats)."""
    from autotune.core.trial.outcome import Measurement

    clock, stand_in, allowed = Clock(trial_s=0.0), StandIn(), []

    def cold_then_warm(argv, bench, setup, on_phase):
        first = not allowed
        allowed.append({p: pin.max_run_s for p, pin in bench.pinned.items()})
        clock.now += 140.0 if first else 59.0
        m: Measurement = stand_in([a for a in argv if a != "--enable-expert-parallel"], bench,
                                  setup, on_phase)
        return dataclasses.replace(m, startup_s=53.0 if first else 30.0,
                                   startup_phases={"jit_s": 23.0} if first else {})

    plan = make_plan(tmp_path, trials=100, references=False, confirm=0, time_budget_s=290.0)
    plan.workdir.mkdir(parents=True)
    storage = InMemoryStorage()
    study, _, _ = prepare_study(plan, Heartbeat(), storage)
    start_clock(study, clock.now)
    StudyRunner(plan, TrialSetup(model="", workdir=plan.workdir), trial_fn=cold_then_warm,
                storage=storage, clock=clock).work()
    assert allowed[0]["low-concurrency"] == pytest.approx(290.0 / 4)  # nothing measured: no start
    assert allowed[2] == {"low-concurrency": pytest.approx(61.0 / 4),
                          "high-concurrency": pytest.approx(61.0 / 4)}


def test_a_confirmation_deployments_runs_share_what_the_budget_leaves_after_its_start(tmp_path, built_once):
    plan, study, _ = tied(tmp_path, built_once, smallest_difference=0.01)  # undecided: confirmed
    clock, stand_in, allowed = Clock(trial_s=10.0), MtpDoesNothing(seed=3), []

    def recording(argv, bench, setup, on_phase):
        allowed.append({p: pin.max_run_s for p, pin in bench.pinned.items()})
        clock.now += clock.trial_s
        return stand_in(argv, bench, setup, on_phase)

    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=3, trial_fn=recording,
            budget_end=clock.now + 100.0, clock=clock, only_open=True, figures=False)
    # the stand-in's trials started in 1 s: 99 s for 2 profiles x 2 repeats, then 10 s less
    assert allowed[0] == {"low-concurrency": pytest.approx(99.0 / 4),
                          "high-concurrency": pytest.approx(99.0 / 4)}
    assert allowed[1]["low-concurrency"] == pytest.approx(89.0 / 4)
