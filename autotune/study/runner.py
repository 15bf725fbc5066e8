"""The study runner: an Optuna multi-objective study whose trials are real deployments.

``prepare_study`` creates (or joins) the study once: objectives, the stored plan, the
reference configs enqueued once for the study. ``StudyRunner.work`` is one worker: an ask/tell
loop over ``study.trial.run_trial`` on one slot, any number of which may share a study (slots
of one node, nodes sharing PostgreSQL). The budget is study-wide (``core.scheduling``); every
running trial sends heartbeats, and a worker that looks for work first fails the trials of dead
workers (Optuna re-enqueues them) and kills what is left of their servers on its own host.

A failed or infeasible trial is stored as COMPLETE with constraint ``served > 0`` violated (so
the sampler learns to avoid the region) and values (0 tok/s, inf ms); a parameter set identical
to an infeasible one is not relaunched; one identical to a running or measured one is resampled
(the skipped trial is stored as FAIL with ``skipped``); SIGINT tears the server down and marks
the trial FAIL (interrupted). Printing is left to the caller through ``Progress``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.exceptions import DuplicatedStudyError, StorageInternalError, UpdateFinishedTrialError
from optuna.storages import RDBStorage
from optuna.storages._heartbeat import get_heartbeat_thread
from optuna.trial import FrozenTrial, TrialState
from optuna_dashboard import save_note
from sqlalchemy.exc import SQLAlchemyError

from autotune.core.flags import to_argv
from autotune.core.objectives import (
    directions,
    infeasible_values,
    metric_names,
    objective_values,
)
from autotune.core.scheduling import Claim, Counts, Step, duplicate_of, next_step, over_budget, position, worker_seed
from autotune.core.space import Params, resolve_references, sample
from autotune.errors import FailureClass, StudyError
from autotune.shell.server import kill_processes, marked_processes, vllm_version
from autotune.shell.validation import VllmValidator
from autotune.study.notes import mirror_constraints, study_note, trial_note
from autotune.study.plans import StudyPlan, store_plan
from autotune.study.records import baseline_of, feasible, records, to_record
from autotune.study.storage import Heartbeat, error_reason, hostname, open_storage, refuse_shared_sqlite
from autotune.study.trial import TrialOutcome, TrialSetup, run_trial

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Metric names and grouped TPE are stable enough for us; the warnings only confuse users.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

FEASIBLE = "served"  # constraint: > 0 when the trial did not deliver a valid measurement
REFS_ENQUEUED = "references_enqueued"
UID = "uid"  # random id of the study, in the trial marker of every server it starts
TRIAL_ENV = "AUTOTUNE_TRIAL"  # <study uid>:<trial number>, on each trial's server processes
MAX_RESAMPLES = 10  # consecutive duplicate samples before a duplicate is measured again


class Progress(Protocol):
    """What the runner reports; the CLI prints it. ``number`` is the trial's place in the
    study-wide budget of ``total``."""

    def phase(self, number: int, total: int, phase: str) -> None: ...
    def trial_done(self, number: int, total: int, trial: FrozenTrial, front: list[int]) -> None:
        ...
    def message(self, text: str) -> None: ...


class SilentProgress:
    def phase(self, number: int, total: int, phase: str) -> None:
        pass

    def trial_done(self, number: int, total: int, trial: FrozenTrial, front: list[int]) -> None:
        pass

    def message(self, text: str) -> None:
        pass


def params_key(params: Params) -> str:
    return json.dumps(params, sort_keys=True)


def hardware_description() -> str:
    """CPU model and count, and GPU names where nvidia-smi answers."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{os.cpu_count()} x {cpu}"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10, check=False)
            gpus = [g.strip() for g in out.stdout.splitlines() if g.strip()]
            if gpus:
                text += f"; {len(gpus)} x {gpus[0]}"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return text


def make_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    """Multivariate TPE over the conditional, mixed space; sample-efficient for a few dozen
    expensive trials, constraint-aware through ``Trial.set_constraint``, reproducible. The
    constant liar counts running trials (of every worker) as bad, so parallel workers spread."""
    return optuna.samplers.TPESampler(
        seed=seed, multivariate=True, group=True, n_startup_trials=5, constant_liar=True,
    )


def _check_objectives(study: optuna.Study, plan: StudyPlan) -> None:
    names = metric_names(plan.profile_names)
    if study.metric_names is None:
        study.set_metric_names(names)
    elif study.metric_names != names:
        raise StudyError(
            f"study {plan.study_name!r} has objectives {study.metric_names}, this run asks for "
            f"{names}; use the same --profile list or another --study name"
        )


def prepare_study(plan: StudyPlan, heartbeat: Heartbeat) -> tuple[optuna.Study, list[str], bool]:
    """Create the study, or join it when it exists; store the plan; enqueue the references
    once for the study (by whichever `run` created it). Returns the study, messages for the
    user, and whether this call created it."""
    storage = open_storage(plan.storage, heartbeat)
    try:
        study = optuna.create_study(study_name=plan.study_name, storage=storage,
                                    directions=directions(plan.profile_names))
        created = True
    except DuplicatedStudyError:
        study = optuna.load_study(study_name=plan.study_name, storage=storage)
        created = False
    if len(study.directions) != len(plan.profile_names) * 2:
        raise StudyError(f"study {plan.study_name!r} has {len(study.directions)} objectives, "
                         f"this run asks for {len(plan.profile_names) * 2}; use another --study name")
    _check_objectives(study, plan)
    store_plan(study, plan)
    if UID not in study.user_attrs:
        study.set_user_attr(UID, uuid.uuid4().hex)
    study.set_user_attr("model", plan.model.name)
    study.set_user_attr("space", plan.space.path)
    study.set_user_attr("profile_specs", [dataclasses.asdict(p) for p in plan.bench.profiles])
    study.set_user_attr("vocab_size", plan.bench.vocab_size)
    return study, enqueue_references(study, plan, created), created


def enqueue_references(study: optuna.Study, plan: StudyPlan, created: bool = True) -> list[str]:
    """Enqueue the applicable references once per study: by the `run` that created it, or
    into a study that has none and no trials yet. Returns messages for skipped ones."""
    if not (plan.seed_references and plan.references):
        return []
    if study.user_attrs.get(REFS_ENQUEUED) or (study.trials and not created):
        return []
    notes = []
    for ref in resolve_references(plan.space, plan.ctx, plan.references.configs):
        if ref.skipped:
            notes.append(f"reference {ref.name}: skipped, {ref.skipped}")
            continue
        study.enqueue_trial(dict(ref.params), user_attrs={"reference": ref.name})
    study.set_user_attr(REFS_ENQUEUED, True)
    study.set_user_attr("baseline", plan.references.baseline)
    return notes


def reap_dead_workers(study: optuna.Study, message: Callable[[str], None]) -> None:
    """Fail the trials of workers that stopped sending heartbeats (Optuna's retry callback
    re-enqueues them), then kill this host's server processes of trials of this study that
    are no longer running (a dead worker's server normally dies with it: PR_SET_PDEATHSIG)."""
    running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    optuna.storages.fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False)
    for number in sorted(running):
        attrs = trials[number].user_attrs
        if trials[number].state == TrialState.FAIL and not (attrs.get("failure_class")
                                                            or attrs.get("skipped")):
            message(f"trial #{number}: its worker stopped sending heartbeats; failed and "
                    "re-enqueued for a live worker")
    uid = study.user_attrs.get(UID)
    for marker, pids in marked_processes(TRIAL_ENV).items():
        study_uid, _, number = marker.partition(":")
        if study_uid == uid and number.isdigit() and int(number) < len(trials) and \
                trials[int(number)].state != TrialState.RUNNING:
            kill_processes(pids)
            message(f"trial #{number}: killed {len(pids)} leftover server process(es) of its "
                    "dead worker")


def look(study: optuna.Study, message: Callable[[str], None], retries: int,
         retry_s: float) -> Counts:
    """Reap dead workers and count the study's trials; rides out a storage outage (a database
    restart) of ``retries`` x ``retry_s``, then gives up with a clear error."""
    for attempt in range(retries + 1):
        try:
            reap_dead_workers(study, message)
            return counts(study)
        except (SQLAlchemyError, StorageInternalError) as exc:
            if attempt == retries:
                raise StudyError(f"lost the study storage: {error_reason(exc)}") from None
            message(f"storage unavailable ({error_reason(exc)}); retrying in {retry_s:g} s")
            time.sleep(retry_s)
    raise AssertionError("unreachable")


def counts(study: optuna.Study) -> Counts:
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    return Counts(finished=sum(t.state == TrialState.COMPLETE for t in trials),
                  running=[t.number for t in trials if t.state == TrialState.RUNNING])


def _claims(study: optuna.Study) -> list[Claim]:
    return [
        Claim(t.number, t.user_attrs["params_key"], t.state == TrialState.RUNNING,
              bool(t.user_attrs.get("failure_class")))
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
        if "params_key" in t.user_attrs
    ]


def _record_outcome(study: optuna.Study, trial: optuna.Trial, plan: StudyPlan,
                    outcome: TrialOutcome, store: FileSystemArtifactStore) -> list[float]:
    """Store the outcome on the trial; returns the objective values."""
    trial.set_user_attr("startup_s", round(outcome.startup_s, 3))
    trial.set_user_attr("bench_s", round(outcome.bench_s, 3))
    trial.set_user_attr("wall_s", round(outcome.wall_s, 3))
    trial.set_user_attr("teardown_clean", outcome.teardown_clean)
    for path in outcome.files:
        upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial)
    profiles = plan.profile_names
    if outcome.failure is not None:
        trial.set_user_attr("failure_class", outcome.failure.value)
        trial.set_user_attr("failure_message", outcome.message[:2000])
        trial.set_user_attr("log_tail", outcome.log_tail[-4000:])
        constraints = [1.0] * (1 + len(plan.slos))
        trial.set_constraint(FEASIBLE, 1.0)
        for slo in plan.slos:
            trial.set_constraint(slo.key, 1.0)
        mirror_constraints(trial, constraints)
        return infeasible_values(profiles)
    means = {name: r.means() for name, r in outcome.results.items()}
    trial.set_user_attr("metrics", means)
    trial.set_user_attr(
        "spread", {name: {m: round(r.spread(m), 4) for m in ("output_throughput",
                   "mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms")}
                   for name, r in outcome.results.items()}
    )
    trial.set_user_attr("repeats", {name: list(map(dict, r.runs))
                                    for name, r in outcome.results.items()})
    constraints = [0.0]
    trial.set_constraint(FEASIBLE, 0.0)
    for slo in plan.slos:
        violation = slo.violation(means[slo.profile][slo.metric])
        trial.set_constraint(slo.key, violation)
        constraints.append(violation)
        if violation > 0:
            trial.set_user_attr("slo_violated", True)
    mirror_constraints(trial, constraints)
    return objective_values(means, profiles)


@dataclass
class StudyRunner:
    """One worker: runs trials on its slot until the study holds ``plan.trials`` finished
    ones. ``label`` names the worker among several ("" for the only one)."""

    plan: StudyPlan
    progress: Progress = field(default_factory=SilentProgress)
    validator: VllmValidator | None = None
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    label: str = ""
    poll_s: float = 5.0
    storage_retries: int = 12  # between trials, ride out two minutes of database outage
    storage_retry_s: float = 10.0
    _resamples: int = 0

    def work(self) -> optuna.Study:
        plan = self.plan
        storage = open_storage(plan.storage, self.heartbeat)
        seed = worker_seed(plan.seed, self.label) if self.label else plan.seed
        try:
            study = optuna.load_study(study_name=plan.study_name, storage=storage,
                                      sampler=make_sampler(seed))
        except KeyError:
            raise StudyError(f"no study {plan.study_name!r} in this storage; create it with "
                             "`autotune run --storage ... --study NAME`") from None
        refuse_shared_sqlite(plan.storage, {
            t.user_attrs.get("worker", {}).get("host", hostname())
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))})
        store_dir = plan.workdir / "artifacts"
        store_dir.mkdir(parents=True, exist_ok=True)
        store = FileSystemArtifactStore(str(store_dir))
        waiting_said = False
        while True:
            now = look(study, self.progress.message, self.storage_retries, self.storage_retry_s)
            step = next_step(now, plan.trials)
            if step is Step.STOP:
                return study
            if step is Step.WAIT:
                if not waiting_said:
                    self.progress.message(
                        f"budget claimed: waiting for {len(now.running)} running trial(s) of other "
                        "workers (a dead worker's trial is retried here after the grace period)")
                    waiting_said = True
                time.sleep(self.poll_s)
                continue
            waiting_said = False
            self._one_trial(study, storage, store)

    def _one_trial(self, study: optuna.Study, storage: RDBStorage,
                   store: FileSystemArtifactStore) -> None:
        t0 = time.monotonic()
        trial = study.ask()
        try:
            with get_heartbeat_thread(trial._trial_id, storage):
                self._run_and_tell(study, trial, store, t0)
        except UpdateFinishedTrialError:
            self.progress.message(f"trial #{trial.number} was failed by another worker (its "
                                  "heartbeats were late); its result is discarded")
        except (SQLAlchemyError, StorageInternalError) as exc:
            raise StudyError(f"lost the study storage during trial #{trial.number} "
                             f"({error_reason(exc)}); its heartbeats stop, so a live worker retries "
                             "it after the grace period") from None
        except BaseException as exc:
            # Ctrl-C, or a bug of ours: never leave the trial RUNNING in the storage.
            interrupted = isinstance(exc, KeyboardInterrupt)
            failure = FailureClass.INTERRUPTED.value if interrupted else "internal_error"
            message = ("interrupted by the user (SIGINT)" if interrupted
                       else f"{type(exc).__name__}: {exc}")
            try:
                trial.set_user_attr("failure_class", failure)
                trial.set_user_attr("failure_message", message[:2000])
                study.tell(trial, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                pass
            raise

    def _skip(self, study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
        """Give a claimed trial back without deploying: FAIL, which samplers ignore."""
        trial.set_user_attr("skipped", reason)
        study.tell(trial, state=TrialState.FAIL)

    def _run_and_tell(self, study: optuna.Study, trial: optuna.Trial,
                      store: FileSystemArtifactStore, t0: float) -> None:
        plan = self.plan
        total = plan.trials
        now = counts(study)
        if over_budget(trial.number, now, total):
            self._skip(study, trial, "over budget: other workers claimed the last trials")
            return
        number = position(trial.number, now)
        params = sample(plan.space, plan.ctx, trial)
        key = params_key(params)
        same = duplicate_of(trial.number, key, _claims(study))
        frozen = study._storage.get_trial(trial._trial_id)
        enqueued = "fixed_params" in frozen.system_attrs or "failed_trial" in frozen.system_attrs
        if same is not None and not same.failed and not enqueued and self._resamples < MAX_RESAMPLES:
            self._resamples += 1
            self._skip(study, trial, f"same parameters as #{same.number}; resampled")
            return
        self._resamples = 0
        argv = to_argv(plan.space, plan.ctx, params)
        trial.set_user_attr("params_key", key)
        trial.set_user_attr("argv", argv)
        trial.set_user_attr("vllm_version", vllm_version())
        trial.set_user_attr("hardware", hardware_description())
        trial.set_user_attr("model", plan.model.name)
        base = plan.setup_defaults or TrialSetup(model=plan.model.name, workdir=plan.workdir)
        trial.set_user_attr("worker", {"host": hostname(), "pid": os.getpid(), "label": self.label,
                                       "slot": base.slot.describe() if base.slot else ""})
        if same is not None and same.failed:
            self._copy_failure(study, trial, study.trials[same.number])
            self._report(study, number, trial.number)
            return
        if same is not None:
            trial.set_user_attr("duplicate_of", same.number)
        setup = dataclasses.replace(
            base, model=plan.model.name, validator=self.validator,
            workdir=plan.workdir / "trials" / plan.study_name / f"trial-{trial.number:04d}",
            extra_env=((TRIAL_ENV, f"{study.user_attrs.get(UID, '')}:{trial.number}"),),
        )
        # Every trial gets the same prompts (a new server has an empty prefix cache), so
        # configurations are compared on identical work; repeats within a trial differ.
        outcome = run_trial(argv, plan.bench, setup,
                            on_phase=lambda ph: self.progress.phase(number, total, ph))
        values = _record_outcome(study, trial, plan, outcome, store)
        trial.set_user_attr("trial_wall_s", round(time.monotonic() - t0, 3))
        study.tell(trial, values)
        self._report(study, number, trial.number)

    def _report(self, study: optuna.Study, number: int, trial_number: int) -> None:
        try:
            self._write_notes(study, trial_number)
        except (SQLAlchemyError, StorageInternalError) as exc:  # another worker wrote it too
            self.progress.message(f"dashboard note not updated: {type(exc).__name__}")
        front = sorted(t.number for t in pareto_front(study))
        self.progress.trial_done(number, self.plan.trials, study.trials[trial_number], front)

    def _write_notes(self, study: optuna.Study, trial_number: int) -> None:
        """The trial's note and the study's Pareto summary, as optuna-dashboard shows them."""
        frozen = study.trials[trial_number]
        recs = records(study)
        base = baseline_of(study, recs)
        profiles = self.plan.profile_names
        save_note(optuna.Trial(study, frozen._trial_id),
                  trial_note(to_record(frozen), frozen.user_attrs.get("argv", []), profiles,
                             base, frozen.user_attrs))
        argv_of = {t.number: t.user_attrs.get("argv", []) for t in study.trials}
        save_note(study, study_note(study.study_name, recs, profiles, base, argv_of))

    def _copy_failure(self, study: optuna.Study, trial: optuna.Trial,
                      previous: FrozenTrial) -> None:
        """Record a parameter set that already failed without launching it again."""
        trial.set_user_attr("duplicate_of", previous.number)
        for attr in ("failure_class", "failure_message", "log_tail"):
            if attr in previous.user_attrs:
                trial.set_user_attr(attr, previous.user_attrs[attr])
        named = {k: v for k, v in previous.constraints.items() if not k.isdigit()}  # not the mirror
        for name, value in named.items():
            trial.set_constraint(name, value)
        mirror_constraints(trial, list(named.values()))
        study.tell(trial, list(previous.values))


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible non-dominated trials over all objectives."""
    return [t for t in study.best_trials if feasible(t)]


def dry_run_argv(plan: StudyPlan, count: int) -> list[tuple[str, list[str]]]:
    """The argv of the first ``count`` trials (references first), from an in-memory copy of
    the study: nothing is launched or written."""
    study = optuna.create_study(directions=directions(plan.profile_names),
                                sampler=make_sampler(plan.seed))
    enqueue_references(study, plan)
    out = []
    for _ in range(count):
        trial = study.ask()
        params = sample(plan.space, plan.ctx, trial)
        label = trial.user_attrs.get("reference") or "sampled"
        out.append((f"trial {trial.number} ({label})", to_argv(plan.space, plan.ctx, params)))
        study.tell(trial, state=TrialState.FAIL)
    return out


