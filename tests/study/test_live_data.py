"""The study's data in memory (study.run.live_data): one full read of the study per run, not
2-3 per deployed trial, and another worker's trials seen where it may have written."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from autotune.study.run.live_data import LiveData
from autotune.study.run.worker_upkeep import count_trials
from autotune.study.store.records import FINISHED, study_data
from tests.helpers import StandIn, make_plan, run


class CountingStorage(optuna.storages.InMemoryStorage):
    """Optuna's in-memory storage, counting full reads of the study's data: every finished
    trial with its attributes (``records.outcomes``, the read behind ``study_data``)."""

    def __init__(self) -> None:
        super().__init__()
        self.full_reads = 0

    def get_all_trials(self, study_id, deepcopy=True, states=None):
        if states is not None and tuple(states) == FINISHED:
            self.full_reads += 1
        return super().get_all_trials(study_id, deepcopy, states)


@pytest.mark.parametrize("settings", [{}, {"race": True}], ids=["plain", "race"])
def test_a_worker_reads_the_studys_data_at_most_once_per_deployed_trial(tmp_path, settings):
    # Before the live data (ba35147): 17 reads for 8 deployments plain, 25 racing.
    storage, deployed = CountingStorage(), StandIn(seed=3)
    run(make_plan(tmp_path, trials=8, **settings), deployed, storage=storage)
    assert len(deployed.calls) == 8
    assert storage.full_reads <= len(deployed.calls)
    assert storage.full_reads == 1  # at open; each tell is written through


def test_another_workers_trials_are_read_where_it_may_have_written(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    plan = make_plan(tmp_path, trials=3)
    study = run(plan, StandIn(seed=3), storage=storage)
    live = LiveData.open(study)
    mine = [t.number for t in live.data().outcomes]
    run(make_plan(tmp_path, trials=6), StandIn(seed=4), storage=storage)  # another worker
    assert [t.number for t in live.data().outcomes] == mine  # not read yet
    live.sync(count_trials(study))
    assert live.data() == study_data(study)
    assert len(live.data().outcomes) > len(mine)


def test_nothing_is_read_again_where_no_other_worker_wrote(tmp_path):
    storage = CountingStorage()
    study = run(make_plan(tmp_path, trials=3), StandIn(seed=3), storage=storage)
    live = LiveData.open(study)
    before = storage.full_reads
    live.sync(count_trials(study))
    assert storage.full_reads == before
    assert live.data() == study_data(study)
    assert not study.get_trials(states=(TrialState.RUNNING,))



def test_a_session_runs_searches_and_confirms_on_one_read_and_ends_with_the_stored_data(tmp_path):
    from autotune.core.deployment.slots import Slot
    from autotune.study.run.session import Node, StudySession
    from autotune.study.run.trial_function import TrialSetup
    from autotune.study.store.storage import load_existing

    plan = make_plan(tmp_path, trials=6, confirm=2)
    deployed = StandIn(seed=3)
    session = StudySession(plan, Node((Slot("cpu", (0,), 1),)),
                           TrialSetup(model="", workdir=plan.workdir), say=lambda text: None,
                           trial_fn=deployed, figures=False)
    session.create(started=0.0)
    assert session.work() == 0
    confirmed = session.confirm(k=2)
    assert confirmed and len(deployed.calls) > 6  # the search's six, then the confirmation's
    # what `run` prints at the end, from memory, is what the storage holds
    assert session.data() == study_data(load_existing(plan.study_name, plan.storage))


def test_another_workers_trial_that_ends_as_a_failure_is_read_once_it_ends(tmp_path):
    storage = optuna.storages.InMemoryStorage()
    study = run(make_plan(tmp_path, trials=3), StandIn(seed=3), storage=storage)
    live = LiveData.open(study)
    theirs = study.ask()  # another worker's trial, running
    live.sync(count_trials(study))
    study.tell(theirs, state=TrialState.FAIL)  # it dies: a failure, not counted as finished
    live.sync(count_trials(study))
    assert theirs.number in [t.number for t in live.data().outcomes]
    assert live.data() == study_data(study)
