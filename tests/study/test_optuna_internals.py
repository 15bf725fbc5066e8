"""Optuna's private API as autotune uses it: each use behaves on the installed Optuna, and the
installed versions lie in the range that was checked, which pyproject.toml accepts exactly."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

import optuna
from optuna.trial import TrialState

from autotune.study.store import optuna_internals as oi
from autotune.study.store.storage import Heartbeat, open_storage
from tests.helpers import REPO, age_heartbeats


def _minor(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def test_the_installed_optuna_and_dashboard_lie_in_the_range_that_was_checked():
    for package, (oldest, newest) in oi.CHECKED_ON.items():
        assert _minor(oldest) <= _minor(version(package)) <= _minor(newest), (
            f"{package} {version(package)} is installed; autotune.study.store.optuna_internals was "
            f"checked on {oldest} to {newest}: run tests/study/test_optuna_internals.py on it, then "
            "widen CHECKED_ON and pyproject.toml")


def test_pyproject_accepts_exactly_the_checked_range():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for package, (oldest, newest) in oi.CHECKED_ON.items():
        major, minor = _minor(newest)
        assert f"{package}>={oldest},<{major}.{minor + 1}" in declared, declared


def test_each_private_use_behaves_on_the_installed_optuna(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 's.db'}", Heartbeat(interval_s=1, grace_s=2, max_retry=1))
    study = optuna.create_study(storage=storage, directions=["minimize"])
    assert isinstance(oi.study_id(study), int)
    assert isinstance(oi.storage_of(study), optuna.storages.BaseStorage)
    study.enqueue_trial({"x": 1.0})
    trial = study.ask()
    trial.suggest_float("x", 0, 2)
    assert oi.was_enqueued(oi.stored_trial(study, trial)) and oi.retry_of(oi.stored_trial(study, trial)) is None
    with oi.heartbeat(trial, storage):
        pass
    oi.mirror_constraints(trial, [0.0])
    assert oi.stored_trial(study, trial).system_attrs[oi.DASHBOARD_CONSTRAINTS_KEY] == [0.0]
    oi.live_trial(study, oi.stored_trial(study, trial)).set_user_attr("note", 1)
    study.tell(trial, 1.0)
    assert study.trials[0].user_attrs == {"note": 1}
    dead = study.ask()
    dead.suggest_float("x", 0, 2)
    oi.record_heartbeat(study, oi.stored_trial(study, dead))  # then its worker dies
    age_heartbeats(tmp_path / "s.db", 3)  # 3 s ago: past the 2 s grace period
    optuna.storages.fail_stale_trials(study)
    retry = study.get_trials(states=(TrialState.WAITING,))
    assert [oi.retry_of(t) for t in retry] == [dead.number] and oi.was_enqueued(retry[0])
    assert not oi.was_enqueued(study.trials[dead.number])
