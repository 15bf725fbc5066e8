"""What a worker does before it asks for a trial: reap dead workers (their trials failed, so that
Optuna's retry callback re-enqueues them; their leftover servers on this host killed) and count
the study's trials, each riding out a storage outage."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import optuna
from optuna.trial import TrialState

from autotune.core.deployment.failures import CONFIG_REJECTED
from autotune.core.plan.scheduling import Counts
from autotune.errors import StudyError
from autotune.shell.server.processes import kill_processes, marked_processes
from autotune.study.store.records import TRIAL_ENV, read_outcome
from autotune.study.store.state import uid
from autotune.study.store.storage import storage_errors

_T = TypeVar("_T")


def reap_dead_workers(study: optuna.Study, message: Callable[[str], None]) -> None:
    """Fail the trials of workers that stopped sending heartbeats (Optuna's retry callback
    re-enqueues them), then kill this host's server processes of trials of this study that
    are no longer running (a dead worker's server normally dies with it: PR_SET_PDEATHSIG). A
    server forked by the pre-imported launcher shows no marker (its environment block is the
    launcher's): it dies with the launcher, which ends when its worker does."""
    running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    optuna.storages.fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False)
    for number in sorted(running):
        outcome = read_outcome(trials[number])
        if outcome.state == "fail" and outcome.failure is None and not outcome.skipped:
            message(f"trial #{number}: its worker stopped sending heartbeats; failed and "
                    "re-enqueued for a live worker")
    mine = uid(study)
    for marker, pids in marked_processes(TRIAL_ENV).items():
        study_uid, _, number = marker.partition(":")
        if mine and study_uid == mine and number.isdigit() and int(number) < len(trials) and \
                trials[int(number)].state != TrialState.RUNNING:
            kill_processes(pids)
            message(f"trial #{number}: killed {len(pids)} leftover server process(es) of its "
                    "dead worker")


def riding_out_outages(action: Callable[[], _T], message: Callable[[str], None], *, retries: int,
                       retry_s: float) -> _T:
    """``action()``, tried again through a storage outage (a database restart) of ``retries`` x
    ``retry_s``; then its error, which names what was lost."""
    for attempt in range(retries + 1):
        try:
            with storage_errors("lost the study storage"):
                return action()
        except StudyError as exc:
            if attempt == retries:
                raise
            message(f"storage unavailable ({exc}); retrying in {retry_s:g} s")
            time.sleep(retry_s)
    raise AssertionError("unreachable")


def count_trials(study: optuna.Study) -> Counts:
    """The study's finished trials (a copy of a measured engine aside), those vLLM rejected
    apart, and the numbers of its running ones."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    ended = [o for o in (read_outcome(t) for t in trials if t.state == TrialState.COMPLETE)
             if o.same_engine_as is None]
    rejected = sum(o.failure is CONFIG_REJECTED for o in ended)
    return Counts(finished=len(ended) - rejected, rejected=rejected,
                  running=[t.number for t in trials if t.state == TrialState.RUNNING])
