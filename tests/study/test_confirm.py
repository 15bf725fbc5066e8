"""`autotune confirm`: the trials and rounds asked for, added to the rounds already stored.
The trial function is test_runner's stand-in (no vLLM): what is under test is which trials
are deployed, how often, and what the study keeps."""

from __future__ import annotations

import pytest
from optuna.exceptions import StorageInternalError

from autotune.errors import ConfigError
from autotune.study.run.confirm_rounds import confirm
from autotune.study.run.trial_function import TrialSetup
from autotune.study.store.records import outcomes, study_data
from autotune.study.store.state import read_confirmation, read_confirmed
from autotune.study.store.storage import Heartbeat
from tests.helpers import TIED_REFS, MtpDoesNothing, StandIn, copy_searched, copy_tied, make_plan


def served_study(tmp_path, built_once):
    """The 6-trial search (``tests.helpers.copy_searched``) copied into ``tmp_path``, and its
    served trials."""
    plan, study = copy_searched(built_once, tmp_path)
    return plan, study, [t.number for t in outcomes(study) if t.feasible]


def test_two_confirmations_of_chosen_trials_add_their_rounds_to_those_stored(tmp_path, built_once):
    plan, study, served = served_study(tmp_path, built_once)
    a, b = served[:2]
    setup = TrialSetup(model="", workdir=plan.workdir)
    first, second = StandIn(seed=1), StandIn(seed=2)
    confirm(study, plan, setup, trials=[a, b], rounds=1, trial_fn=first, figures=False)
    after_one = read_confirmed(study)
    said: list[str] = []
    confirm(study, plan, setup, trials=[b, a], rounds=2, trial_fn=second, say=said.append, figures=False)
    stored = read_confirmed(study)
    # the second confirmation: its first round deploys both, then at most one more each
    assert len(first.calls) == 2 and 2 <= len(second.calls) <= 4
    assert set(stored) == {a, b}
    # The study's data knows which numbers are confirmed and what a round adds (repeats 2).
    assert (study_data(study).confirmed, study_data(study).repeats) == ({a, b}, 2)
    assert study_data(study, confirmed=False).confirmed == frozenset()
    for n in (a, b):
        again = 1 + sum(argv == call for call in second.calls[2:]
                        for argv in [study_data(study).outcomes[n].argv])
        for profile, result in stored[n].items():  # 2 runs per deployment (repeats 2)
            assert len(after_one[n][profile].runs) == 2
            assert len(result.runs) == 2 + 2 * again
            assert result.runs[:2] == after_one[n][profile].runs  # the earlier rounds are kept
            # and each confirmed run keeps how it stopped, for the tables' requests column
            assert [s.reason for s in result.stops] == ["ceiling"] * len(result.runs)


def test_without_trials_the_finalists_are_confirmed_as_before(tmp_path, built_once):
    plan, study, _ = served_study(tmp_path, built_once)
    stand_in = StandIn()
    confirmed = confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=2, rounds=1,
                        trial_fn=stand_in, figures=False)
    assert len(stand_in.calls) == len(confirmed) >= 2 and set(read_confirmed(study)) == set(confirmed)


@pytest.mark.parametrize("trials, rounds, message", [
    ([99], 1, "--trials 99: #99 not a served trial of this study; served: #"),
    ([], 1, "--trials : "),
], ids=["unknown-trial", "no-trial"])
def test_a_confirmation_of_trials_that_cannot_be_confirmed_deploys_nothing(tmp_path, built_once, trials, rounds,
                                                                         message):
    plan, study, _ = served_study(tmp_path, built_once)
    stand_in = StandIn()
    with pytest.raises(ConfigError) as err:
        confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=2, trials=trials,
                rounds=rounds, trial_fn=stand_in, figures=False)
    assert message in str(err.value) and not stand_in.calls and not read_confirmed(study)


@pytest.mark.parametrize("text, expected", [("3,7", [3, 7]), ("#3, #7,3", [3, 7])])
def test_trials_are_read_from_a_comma_list(text, expected):
    from autotune.core.plan.confirmation import trial_numbers

    assert trial_numbers(text) == expected


def test_trials_that_are_not_numbers_are_one_line(tmp_path):
    from autotune.core.plan.confirmation import trial_numbers

    with pytest.raises(ConfigError, match="--trials '3,x': expected trial numbers separated by commas"):
        trial_numbers("3,x")


def test_after_the_first_round_each_deployment_goes_to_a_finalist_still_undecided(tmp_path,
                                                                                  built_once):
    plan, study, (base, mtp, o0) = copy_tied(tmp_path, built_once, smallest_difference=0.01)
    stand_in, said = MtpDoesNothing(seed=3), []
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), trials=[base, mtp, o0],
            rounds=3, trial_fn=stand_in, say=said.append, figures=False)
    stored = study_data(study).outcomes
    times = {n: sum(argv == stored[n].argv for argv in stand_in.deployed) for n in (base, mtp, o0)}
    # -O0 is decided after the first round: never deployed again; each later step deploys one
    # of the two still undecided, up to the 3 x 3 deployments three rounds would take
    assert times[o0] == 1 and times[base] >= 2 and times[mtp] >= 2
    assert sum(times.values()) == 9
    steps = [line for line in said if line.startswith("confirm step ") and "reduces" in line]
    assert len(steps) == 6 and all(f"#{o0}:" not in line for line in steps)
    assert read_confirmation(study).done[-1][1] in (base, mtp)


def test_a_confirmation_stops_when_every_answer_is_equivalent_or_decided(tmp_path, built_once):
    plan, study, (base, mtp, o0) = copy_tied(tmp_path, built_once, smallest_difference=0.5)
    stand_in, said = MtpDoesNothing(seed=3), []
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), trials=[base, mtp, o0],
            rounds=3, trial_fn=stand_in, say=said.append, figures=False)
    assert len(stand_in.deployed) == 3  # the first round only: within 50% they are equivalent
    assert said[-1] == ("confirmation stops: every use's answer is decided or equivalent "
                        "(interactive, throughput, balanced)")


class Interrupted(StandIn):
    """``StandIn`` that is interrupted (Ctrl-C) at its deployment number ``at``."""

    def __init__(self, at: int) -> None:
        super().__init__(seed=7)
        self.at = at

    def __call__(self, argv, bench, setup, on_phase):
        if len(self.calls) + 1 == self.at:
            self.calls.append(tuple(argv))
            raise KeyboardInterrupt
        return super().__call__(argv, bench, setup, on_phase)


def test_an_interrupted_confirmation_keeps_its_deployments_and_confirm_again_continues_it(
        tmp_path, built_once):
    whole_plan, whole, _ = served_study(tmp_path / "whole", built_once)
    plan, study, _ = served_study(tmp_path / "cut", built_once)  # the same study, twice
    setup = TrialSetup(model="", workdir=plan.workdir)
    uninterrupted = StandIn(seed=7)
    confirm(whole, whole_plan, TrialSetup(model="", workdir=whole_plan.workdir), k=2, rounds=1,
            trial_fn=uninterrupted, figures=False)
    assert len(uninterrupted.calls) >= 2
    cut = Interrupted(at=2)
    with pytest.raises(KeyboardInterrupt):
        confirm(study, plan, setup, k=2, rounds=1, trial_fn=cut, figures=False)
    kept = read_confirmed(study)
    assert len(read_confirmation(study).done) == len(kept) == 1  # the one torn down
    assert all(len(r.runs) == 2 for by in kept.values() for r in by.values())  # repeats 2
    said: list[str] = []
    again = StandIn(seed=8)
    confirm(study, plan, setup, k=2, rounds=1, trial_fn=again, say=said.append, figures=False)
    assert said[0].startswith("continuing the confirmation stored in the study: 1 of up to")
    assert 1 + len(again.calls) == len(uninterrupted.calls)
    assert {n: {p: len(r.runs) for p, r in by.items()} for n, by in read_confirmed(study).items()} \
        == {n: {p: len(r.runs) for p, r in by.items()} for n, by in read_confirmed(whole).items()}
    assert read_confirmation(study).finished


def test_an_unfinished_confirmation_of_trials_no_longer_finalists_is_not_continued(tmp_path, built_once):
    """A search resumed after an interrupted confirmation can change the front: the stored
    confirmation's trials are then not the finalists, and a new confirmation is planned."""
    from autotune.core.analysis.study_data import finalists
    from autotune.core.plan.confirmation import ConfirmationState
    from autotune.study.store.state import write_confirmation

    plan, study, served = served_study(tmp_path, built_once)
    chosen = {t.number for t in finalists(study_data(study, confirmed=False), 2)}
    stale = next(n for n in served if n not in chosen)
    write_confirmation(study, ConfirmationState((stale,), 1))
    said: list[str] = []
    stand_in = StandIn(seed=9)
    confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=2, rounds=1,
            trial_fn=stand_in, say=said.append, figures=False)
    assert not said[0].startswith("continuing")
    assert stale not in read_confirmed(study)


def test_a_confirmation_whose_deployments_grow_costlier_stops_before_passing_the_budget(tmp_path):
    from autotune.study.run.runner import StudyRunner
    from autotune.study.run.study_setup import prepare_study

    plan = make_plan(tmp_path, trials=3, refs=TIED_REFS, smallest_difference=0.01)
    plan.workdir.mkdir(parents=True)
    prepare_study(plan, Heartbeat())
    now, cost, stand_in = [0.0], [100.0], MtpDoesNothing(seed=3)

    def timed(argv, bench, setup, on_phase):  # the search's deployments take 100 s
        now[0] += cost[0]
        return stand_in(argv, bench, setup, on_phase)

    setup = TrialSetup(model="", workdir=plan.workdir)
    study = StudyRunner(plan, setup, trial_fn=timed, clock=lambda: now[0]).work()
    base, mtp, o0 = (t.number for t in outcomes(study))
    cost[0], start, said = 250.0, now[0], []  # the confirmation's take 250 s
    confirm(study, plan, setup, trials=[base, mtp, o0], rounds=1, trial_fn=timed,
            say=said.append, budget_end=start + 400.0, clock=lambda: now[0], figures=False)
    # Planned at 100 s: 3 deployments in 400 s; after the first took 250 s, the next would
    # end at 500 s: it does not start.
    assert len(stand_in.deployed) == 3 + 1 and now[0] - start == 250.0
    assert said[0] == "confirmation: 3 trial(s) x 1 round(s), about 5 min of 6 min 40 s left"
    assert said[-1].startswith("confirmation stops: the time budget ends (2 min 30 s left, a "
                               "deployment takes ~4 min 10 s)")
    assert not read_confirmation(study).finished  # `confirm` continues it


def test_a_stored_confirmation_reads_back_as_the_same_record_and_keeps_the_stored_layout():
    from autotune.core.plan.confirmation import ConfirmationState

    state = ConfirmationState((3, 1), 2).with_step([3, 1]).with_done(0, 3, 1).with_done(0, 1, 2)
    stored = state.to_dict()
    assert stored == {"trials": [3, 1], "rounds": 2, "round_trials": {"0": [3, 1]},
                      "done": [[0, 3], [0, 1]], "deployed": {"1": 2, "3": 1}, "finished": False}
    assert ConfirmationState.from_dict(stored) == state
    assert (state.total_steps, state.deployments_of(1), ConfirmationState().total_steps) == (3, 2, 0)


def test_runs_confirmation_opens_the_stored_study_for_writing(tmp_path, built_once):
    """`run` ends by confirming in the same storage: the study is opened for writing there,
    while the reading commands open it read-only (a read-only open here failed the main job
    with 'attempt to write a readonly database')."""
    from autotune.study.run.session import Node, StudySession
    from autotune.study.store.storage import load_existing

    plan, study, _ = served_study(tmp_path, built_once)
    StudySession(plan, Node(()), TrialSetup(model="", workdir=plan.workdir),
                 say=lambda text: None, figures=False).confirm(k=1, budget_s=0.0)
    assert read_confirmation(load_existing(plan.study_name, plan.storage)) is not None
    reader = load_existing(plan.study_name, plan.storage)
    with pytest.raises(StorageInternalError):  # SQLite's "attempt to write a readonly database"
        reader.set_user_attr("x", 1)


def test_confirmed_runs_are_stored_one_group_per_deployment_and_the_old_flat_layout_reads_as_one():
    import optuna

    from autotune.core.trial.outcome import ProfileResult
    from autotune.study.store.records import with_confirmed
    from autotune.study.store.state import add_confirmed, read_confirmed

    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    run = lambda v: {"mean_e2el_ms": v}  # noqa: E731
    study.set_user_attr("confirmed", {"3": {"p": [run(1.0), run(2.0), run(3.0)]}})  # before #35
    assert read_confirmed(study)[3]["p"].deployment_sizes == (3,)  # unknown grouping: one deployment
    add_confirmed(study, {3: {"p": ProfileResult("p", (run(4.0), run(5.0)))},  # one deployment each
                          5: {"p": ProfileResult("p", (run(6.0),))}})
    add_confirmed(study, {5: {"p": ProfileResult("p", (run(7.0),))}})
    stored = read_confirmed(study)
    assert stored[3]["p"].deployment_sizes == (3, 2) and stored[3]["p"].deployment_means("mean_e2el_ms") == [2.0, 4.5]
    assert stored[5]["p"].deployment_means("mean_e2el_ms") == [6.0, 7.0]
    # The search deployment is one more deployment of the trial, first.
    merged = with_confirmed({"p": ProfileResult("p", (run(10.0), run(12.0)))}, stored[5])
    assert merged["p"].deployment_means("mean_e2el_ms") == [11.0, 6.0, 7.0]
    assert merged["p"].mean("mean_e2el_ms") == pytest.approx(8.0)  # the mean over deployments
