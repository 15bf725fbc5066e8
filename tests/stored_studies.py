"""Stored studies without vLLM, for tests of the reading commands (tables, --format json|csv,
export, report, plots).

A stand-in for what `autotune run` stores, one level above a trial: each trial's
``TrialOutcome`` is written through ``study.store.records.write_outcome`` and the plan through
``study.store.state.write_plan``, exactly as a run writes them, into a real SQLite file; only
the deployments are not made (their numbers are given here). Every value is chosen so that a
test can state what the commands must print for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from autotune.core.deployment import failures
from autotune.core.plan.request import PlanRequest
from autotune.core.trial.capacity_search import Boundary, CapacitySearch, Probe
from autotune.core.trial.objectives import parse_objective
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.core.trial.precision import RunStop
from autotune.core.trial.told import FEASIBLE
from autotune.core.workload.profiles import get_profile
from autotune.study.store.records import write_outcome
from autotune.study.store.state import mark_references, write_plan
from autotune.study.store.storage import Heartbeat, open_storage

PROFILES = ("low-concurrency", "high-concurrency")
OBJECTIVES = ("low-concurrency:mean_e2el_ms:min", "high-concurrency:output_throughput:max")
PHASES = {"imports_s": 11.0, "engine_s": 9.0, "workers_s": 20.0, "compile_s": 29.0,
          "compile_cache": "miss"}


def flags(params: Mapping[str, object]) -> tuple[str, ...]:
    """``vllm serve`` flags of ``params`` (max_num_seqs=128: --max-num-seqs 128)."""
    return tuple(w for k, v in params.items() for w in (f"--{k.replace('_', '-')}", str(v)))


def run_metrics(e2el_ms: float, throughput: float) -> dict[str, float]:
    """One run's vLLM-keyed metrics, derived from its mean E2EL and output throughput."""
    return {"output_throughput": throughput, "request_throughput": throughput / 256,
            "mean_e2el_ms": e2el_ms, "median_e2el_ms": e2el_ms * 0.98,
            "p99_e2el_ms": e2el_ms * 1.3, "mean_ttft_ms": e2el_ms / 20,
            "mean_tpot_ms": e2el_ms / 270, "completed": 100.0}


def served(*, e2el_ms: float, throughput: float, reference: str = "",
           params: Mapping[str, object] | None = None, spread: float = 0.01) -> TrialOutcome:
    """A served trial: two runs per profile (each ``spread`` apart around the values), low
    concurrency at ``e2el_ms`` and a quarter of ``throughput``, high concurrency at
    ``throughput`` and four times ``e2el_ms``; each run's stop and the start-up phases."""
    def runs(e2el: float, tput: float) -> tuple[dict[str, float], ...]:
        return (run_metrics(e2el * (1 - spread), tput * (1 + spread)),
                run_metrics(e2el * (1 + spread), tput * (1 - spread)))
    stops = (RunStop(40, "precise", 2, 2), RunStop(60, "precise", 2, 2))
    results = {
        "low-concurrency": ProfileResult("low-concurrency", runs(e2el_ms, throughput / 4), stops),
        "high-concurrency": ProfileResult("high-concurrency", runs(4 * e2el_ms, throughput),
                                          (RunStop(200, "ceiling", 100, 100),) * 2),
    }
    params = dict(params or {"max_num_seqs": 256})
    return TrialOutcome(-1, params=params, reference=reference,
                        model="/models/m", argv=flags(params), results=results,
                        startup_s=75.0, startup_phases=dict(PHASES), vllm_version="vllm 0.26.0")


def failed(message: str, *, params: Mapping[str, object] | None = None) -> TrialOutcome:
    """A trial whose deployment failed (vLLM's words in ``message``)."""
    params = dict(params or {"max_num_seqs": 1024})
    return TrialOutcome(-1, state="fail", params=params, model="/models/m", argv=flags(params),
                        failure=failures.failure_class("config_rejected"), failure_message=message)


def with_capacity(t: TrialOutcome, loads: Sequence[tuple[float, float]], *, met: float,
                  missed: float | None, profile: str = "capacity") -> TrialOutcome:
    """``t`` with a capacity search of ``profile``: one probe per (load, p99 E2EL ms)."""
    probes = tuple(Probe(load, {**run_metrics(e2el / 1.3, 100 * load), "p99_e2el_ms": e2el})
                   for load, e2el in loads)
    search = CapacitySearch(profile, "concurrency", ("p99_e2el_ms<=2000",),
                            Boundary(met, missed, met, "resolved", len(probes)), probes)
    return dataclasses.replace(t, capacity={**t.capacity, profile: search})


def store(folder: Path, trials: Sequence[TrialOutcome], *, name: str = "s",
          baseline: str | None = None, profiles: Sequence[str] = PROFILES) -> str:
    """Write ``trials`` (numbered 0, 1, ... in order) as a study named ``name`` into
    ``folder``/autotune.db, with its plan (``profiles``, ``OBJECTIVES``); returns the URL."""
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'autotune.db'}"
    objectives = [parse_objective(o, list(profiles)) for o in OBJECTIVES]
    rdb = open_storage(url, Heartbeat())
    study = optuna.create_study(study_name=name, storage=rdb,
                                directions=[o.direction for o in objectives])
    study.set_metric_names([o.name for o in objectives])
    write_plan(study, PlanRequest(profiles=tuple(get_profile(p) for p in profiles),
                                  model="/models/m", objectives=OBJECTIVES, trials=len(trials)))
    if baseline is not None:
        mark_references(study, baseline)
    choices: dict[str, list] = {}
    for t in trials:
        for k, v in t.params.items():
            choices.setdefault(k, []).append(v) if v not in choices.get(k, []) else None
    for t in trials:
        study.enqueue_trial(dict(t.params))
        trial = study.ask({k: CategoricalDistribution(choices[k]) for k in t.params})
        write_outcome(trial, dataclasses.replace(t, number=trial.number))
        if t.state == "fail":
            trial.set_constraint(FEASIBLE, 1.0)
            study.tell(trial, state=TrialState.FAIL)
        else:
            trial.set_constraint(FEASIBLE, 0.0)
            study.tell(trial, [t.value(o.profile, o.metric) for o in objectives])
    rdb.engine.dispose()  # closed as a finished `run` leaves it: no -wal or -shm file
    with contextlib.closing(sqlite3.connect(folder / "autotune.db")) as last:
        last.execute("PRAGMA schema_version")
    return url
