"""`autotune confirm`: the trials and rounds asked for, added to the rounds already stored.
The trial function is test_runner's stand-in (no vLLM): what is under test is which trials
are deployed, how often, and what the study keeps."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.study.confirm import confirm
from autotune.study.records import outcomes, study_data
from autotune.study.state import read_confirmed
from autotune.study.trial import TrialSetup
from tests.test_runner import StandIn, make_plan, run


def served_study(tmp_path):
    plan = make_plan(tmp_path, trials=6)
    study = run(plan, StandIn())
    served = [t.number for t in outcomes(study) if t.feasible]
    return plan, study, served


def test_two_confirmations_of_chosen_trials_add_their_rounds_to_those_stored(tmp_path):
    plan, study, served = served_study(tmp_path)
    a, b = served[:2]
    setup = TrialSetup(model="", workdir=plan.workdir)
    first, second = StandIn(seed=1), StandIn(seed=2)
    confirm(study, plan, setup, trials=[a, b], rounds=1, trial_fn=first)
    after_one = read_confirmed(study)
    said: list[str] = []
    confirm(study, plan, setup, trials=[b, a], rounds=2, trial_fn=second, say=said.append)
    stored = read_confirmed(study)
    # -O0 halves everything: after the second confirmation's first round nothing is open, so
    # its second round deploys nobody.
    assert (len(first.calls), len(second.calls)) == (2, 2)  # each trial once per round
    assert said[-1].startswith("confirmation stops: every use")
    assert set(stored) == {a, b}
    # The study's data knows which numbers are confirmed and what a round adds (repeats 2).
    assert (study_data(study).confirmed, study_data(study).repeats) == ({a, b}, 2)
    assert study_data(study, confirmed=False).confirmed == frozenset()
    for n in (a, b):
        for profile, result in stored[n].items():  # 2 runs per round (repeats 2): 1 round, then 2
            assert len(after_one[n][profile].runs) == 2 and len(result.runs) == 4
            assert result.runs[:2] == after_one[n][profile].runs  # the earlier rounds are kept


def test_without_trials_the_finalists_are_confirmed_as_before(tmp_path):
    plan, study, _ = served_study(tmp_path)
    stand_in = StandIn()
    confirmed = confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=2, rounds=1,
                        trial_fn=stand_in)
    assert len(stand_in.calls) == len(confirmed) >= 2 and set(read_confirmed(study)) == set(confirmed)


@pytest.mark.parametrize("trials, rounds, message", [
    ([99], 1, "--trials 99: #99 not a served trial of this study; served: #"),
    ([], 1, "--trials : "),
], ids=["unknown-trial", "no-trial"])
def test_a_confirmation_of_trials_that_cannot_be_confirmed_deploys_nothing(tmp_path, trials, rounds, message):
    plan, study, _ = served_study(tmp_path)
    stand_in = StandIn()
    with pytest.raises(ConfigError) as err:
        confirm(study, plan, TrialSetup(model="", workdir=plan.workdir), k=2, trials=trials,
                rounds=rounds, trial_fn=stand_in)
    assert message in str(err.value) and not stand_in.calls and not read_confirmed(study)


@pytest.mark.parametrize("text, expected", [("3,7", [3, 7]), ("#3, #7,3", [3, 7])])
def test_trials_are_read_from_a_comma_list(text, expected):
    from autotune.cli.study import trial_numbers

    assert trial_numbers(text) == expected


def test_trials_that_are_not_numbers_are_one_line(tmp_path):
    from autotune.cli.study import trial_numbers

    with pytest.raises(ConfigError, match="--trials '3,x': expected trial numbers separated by commas"):
        trial_numbers("3,x")
