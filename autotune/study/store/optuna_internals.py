"""The one module that reaches into Optuna's internals, each use a function: a heartbeat outside
``Study.optimize``, storage ids, the system attributes of enqueued (``fixed_params``) and retried
(``failed_trial``) trials, and the one optuna-dashboard (0.19-0.21) reads feasibility from.
``CHECKED_ON`` gives the versions they were checked on (tests/study/test_optuna_internals.py);
pyproject.toml accepts exactly that range and a test fails on another, so that an upgrade is a
decision, not a surprise."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.storages._heartbeat import get_heartbeat_thread
from optuna.trial import FrozenTrial

# (oldest, newest) minor versions checked, with the fast tests of the study layer: optuna 5.0.0
# and 5.1.0, optuna-dashboard 0.19.0 and 0.21.0. Older optuna lacks Trial.set_constraint (4.9)
# and RetryHeartbeatStaleTrialCallback (4.5).
CHECKED_ON = {"optuna": ("5.0", "5.1"), "optuna-dashboard": ("0.19", "0.21")}
DASHBOARD_CONSTRAINTS_KEY = "constraints"


def heartbeat(trial: optuna.Trial, storage: BaseStorage) -> AbstractContextManager[Any]:
    """The thread that sends a running trial's heartbeats (what ``optimize`` would start)."""
    return get_heartbeat_thread(trial._trial_id, storage)


def study_id(study: optuna.Study) -> int:
    """The study's id in its storage (optuna-dashboard's URLs use it)."""
    return study._study_id


def storage_of(study: optuna.Study) -> BaseStorage:
    return study._storage


def stored_trial(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial:
    """A running trial's stored state (system attributes included)."""
    return study._storage.get_trial(trial._trial_id)


def live_trial(study: optuna.Study, trial: FrozenTrial) -> optuna.Trial:
    """A handle on a stored trial through which notes and attributes can be written."""
    return optuna.Trial(study, trial._trial_id)


def was_enqueued(trial: FrozenTrial) -> bool:
    """Its parameters were fixed before sampling: an enqueued reference, or a retry."""
    return "fixed_params" in trial.system_attrs or "failed_trial" in trial.system_attrs


def retry_of(trial: FrozenTrial) -> int | None:
    """The number of the dead worker's trial that this one runs again, if any."""
    return trial.system_attrs.get("failed_trial")


def mirror_constraints(trial: optuna.Trial, values: list[float]) -> None:
    """Write the constraint list where optuna-dashboard 0.19-0.21 looks (before ``tell``): it reads
    feasibility from the older ``constraints`` system attribute, not from ``set_constraint``."""
    trial.storage.set_trial_system_attr(trial._trial_id, DASHBOARD_CONSTRAINTS_KEY, values)


def record_heartbeat(study: optuna.Study, trial: FrozenTrial) -> None:
    """One heartbeat for a trial, as its worker would send it (tests of dead workers)."""
    study._storage.record_heartbeat(trial._trial_id)
