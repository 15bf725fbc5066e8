"""The study runner: an Optuna multi-objective study whose trials are real deployments.
``StudyRunner.work`` is one worker's ask/tell loop over a trial function on one slot; any number
may share a study. A failure not of the configuration is run once more, and a second stops the
study; a measured engine is never deployed again (a copy: its values, out of the budget), so that
the search ends once the space or the sampler is exhausted. Printing is the caller's
(``Progress``). The rules in full: docs/studies.md#the-search."""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.core.analysis.study_data import StudyData, finalists, noise_line
from autotune.core.deployment import failures
from autotune.core.deployment.baseline import Baseline
from autotune.core.maths.durations import duration_text
from autotune.core.plan.budget import TimeLeft, expected_trial_s, start_up, trial_cost
from autotune.core.plan.confirmation import failed_deployment_cost_s, in_question
from autotune.core.plan.scheduling import (
    REJECTED_CAP,
    Claim,
    Step,
    duplicate_of,
    next_step,
    over_budget,
    position,
    stop_text,
    worker_seed,
)
from autotune.core.plan.trial_context import TrialValues, trial_context
from autotune.core.space.search_space import drawable_points, params_key
from autotune.core.trial.outcome import Measurement, TrialOutcome
from autotune.core.trial.sampler_feedback import finite_values, what_to_tell
from autotune.errors import SpaceError, StudyError
from autotune.shell.server.validation import engine_identity
from autotune.study.output.notes import study_note, trial_note
from autotune.study.run.confirm_rounds import deploy_once
from autotune.study.run.live_data import LiveData
from autotune.study.run.samplers import make_sampler
from autotune.study.run.study_plan import StudyPlan
from autotune.study.run.study_setup import trial_flags
from autotune.study.run.trial_function import BenchSpec, TrialFunction, TrialSetup, Validated, run_trial, validated
from autotune.study.run.worker_upkeep import count_trials, reap_dead_workers, riding_out_outages
from autotune.study.store import optuna_internals
from autotune.study.store.records import (
    TRIAL_ENV,
    read_outcome,
    write_outcome,
)
from autotune.study.store.state import baseline_config, time_budget, uid
from autotune.study.store.storage import (
    Heartbeat,
    hostname,
    open_storage,
    refuse_shared_sqlite,
    storage_errors,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Metric names and grouped TPE are stable enough for us; the warnings only confuse users.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

MAX_RESAMPLES = 10  # consecutive samples of measured engines after which the search stops


class Progress(Protocol):
    """What the runner reports; the CLI prints it. ``number`` is the trial's place in the
    study-wide budget of ``total``."""

    def phase(self, number: int, total: int, phase: str, trial: int | None = None) -> None: ...
    def trial_done(self, number: int, total: int, trial: TrialOutcome, front: list[int]) -> None:
        ...
    def message(self, text: str) -> None: ...


class SilentProgress:
    def phase(self, number: int, total: int, phase: str, trial: int | None = None) -> None:
        pass

    def trial_done(self, number: int, total: int, trial: TrialOutcome, front: list[int]) -> None:
        pass

    def message(self, text: str) -> None:
        pass


def _claims(study: optuna.Study) -> list[Claim]:
    """Configurations taken: measured ones, and running ones that have sampled theirs."""
    found = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        o = read_outcome(t)
        if o.failure is not None and not o.failure.blames_configuration:
            continue  # not held against the configuration (stored by an older autotune)
        if o.state == "complete" or o.argv:
            found.append(Claim(o.number, o.engine or o.key, o.state == "running",
                               o.failure is not None))
    return found


@dataclass
class StudyRunner:
    """One worker: runs trials on its slot until the study holds ``plan.trials`` finished
    ones. ``setup`` says where it deploys (slot, entry point, validator); ``trial_fn`` runs
    one configuration (the real deployment by default; tests of the logic above a trial pass
    a stand-in, `benchmarks/sampler_efficiency.py` a replay); ``sampler_fn`` builds the sampler
    from the seed and the plan's sampler name (the benchmark passes variants of its settings).
    ``label`` names the worker among several ("" for the only one)."""

    plan: StudyPlan
    setup: TrialSetup
    trial_fn: TrialFunction = run_trial
    # None: make_sampler with a random start sized to the budget (core.plan.budget.start_up)
    sampler_fn: Callable[[int | None, str], optuna.samplers.BaseSampler] | None = None
    storage: BaseStorage | None = None  # None: plan.storage (a replay passes an in-memory one)
    progress: Progress = field(default_factory=SilentProgress)
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    label: str = ""
    poll_s: float = 5.0
    storage_retries: int = 12  # between trials, ride out two minutes of database outage
    storage_retry_s: float = 10.0
    clock: Callable[[], float] = time.time  # wall clock (epoch seconds): trial walls, time budget
    sleep: Callable[[float], None] = time.sleep  # waits for another worker's trial (tests: a seam)
    # argv -> the engine it resolves to; None: vLLM's resolution through setup.validator
    engine_id: Callable[[Sequence[str]], str] | None = None
    _resamples: int = 0
    _drawable: frozenset[str] | None = None  # params keys the space can draw (None: not listable)
    _drawable_known: bool = False
    _baseline: Baseline | None = None  # the study's measured baseline (its first trial)
    # The study's data in memory: read at open, updated after each tell (study.run.live_data)
    _live: LiveData | None = None

    @property
    def live(self) -> LiveData:
        assert self._live is not None, "work() opens the study's data"
        return self._live

    def work(self) -> optuna.Study:
        plan = self.plan
        storage = self.storage or open_storage(plan.storage, self.heartbeat)
        seed = worker_seed(plan.seed, self.label) if self.label else plan.seed
        try:
            study = optuna.load_study(study_name=plan.study_name, storage=storage)
        except KeyError:
            raise StudyError(f"no study {plan.study_name!r} in this storage; create it with "
                             "`autotune run --storage ... --study NAME`") from None
        self._live = LiveData.open(study)
        study.sampler = self._sampler(study, seed)
        self._baseline = baseline_config(study)
        refuse_shared_sqlite(plan.storage, {
            read_outcome(t).worker.get("host", hostname())
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))})
        store_dir = plan.workdir / "artifacts"
        store_dir.mkdir(parents=True, exist_ok=True)
        store = FileSystemArtifactStore(str(store_dir))
        waiting_said = False
        time_said = -1
        began = self.clock()
        say, retry = self.progress.message, {"retries": self.storage_retries,
                                             "retry_s": self.storage_retry_s}
        while True:
            riding_out_outages(lambda: reap_dead_workers(study, say), say, **retry)
            now = riding_out_outages(lambda: count_trials(study), say, **retry)
            self._live.sync(now)  # where another worker may have written
            step = next_step(now, plan.trials)
            if step is Step.STOP:
                who = f"worker {self.label}" if self.label else "search"
                self.progress.message(f"{who} stops after {duration_text(self.clock() - began, clock=True)}"
                                      f": {stop_text(now, plan.trials)}")
                return study
            if step is Step.WAIT:
                if not waiting_said:
                    self.progress.message(
                        f"budget claimed: waiting for {len(now.running)} running trial(s) of other "
                        "workers (a dead worker's trial is retried here after the grace period)")
                    waiting_said = True
                self.sleep(self.poll_s)
                continue
            waiting_said = False
            done = self._search_done(study)
            if done:
                self.progress.message(f"search stops: {done}")
                return study
            left = time_left(study, plan, now=self.clock(), live=self._live)
            if left is not None and not left.fits:
                self.progress.message(f"time budget: no new trial starts ({left.text})")
                return study
            if left is not None and now.finished != time_said:  # once per finished trial
                self.progress.message(left.text)
                time_said = now.finished
            self._one_trial(study, storage, store)

    def _sampler(self, study: optuna.Study, seed: int | None) -> optuna.samplers.BaseSampler:
        """The given sampler factory's, or ``make_sampler``'s with a random start sized to the
        trials the budget allows (said once)."""
        plan = self.plan
        if self.sampler_fn is not None:
            return self.sampler_fn(seed, plan.sampler)
        data = self.live.data(confirmed=False)
        start = start_up(plan.trials, budget_s=plan.time_budget_s,
                         trial_s=expected_trial_s(data.outcomes), platform=plan.ctx.platform)
        if plan.sampler in ("tpe", "gp"):
            self.progress.message(start.text)
        return make_sampler(seed, plan.sampler, start.random_trials)

    def _search_done(self, study: optuna.Study) -> str:
        """Why the search has nothing left to measure ("" while it has): every configuration
        the space can draw is held by a finished trial, or the sampler drew only measured
        engines ``MAX_RESAMPLES`` times in a row."""
        if self._resamples >= MAX_RESAMPLES:
            return (f"the sampler drew only measured engines {self._resamples} times in a row: "
                    "the search has converged")
        if not self._drawable_known:
            self._drawable_known = True
            try:
                self._drawable = frozenset(params_key(p) for p in
                                           drawable_points(self.plan.space, self.plan.ctx))
            except SpaceError:  # a continuous parameter: the space cannot be listed
                self._drawable = None
        if not self._drawable:
            return ""
        held = [read_outcome(t) for t in study.get_trials(deepcopy=False,
                                                          states=(TrialState.COMPLETE,))]
        keys = {o.key for o in held}
        if not self._drawable <= keys:
            return ""
        engines = {o.engine or o.key for o in held if o.key in self._drawable}
        return f"all {len(engines)} distinct engine(s) of the space are measured"

    def _one_trial(self, study: optuna.Study, storage: BaseStorage,
                   store: FileSystemArtifactStore) -> None:
        t0 = self.clock()
        trial = study.ask()
        try:
            with storage_errors(f"lost the study storage during trial #{trial.number} (its "
                                "heartbeats stop, so a live worker retries it after the grace "
                                "period)"), optuna_internals.heartbeat(trial, storage):
                self._run_and_tell(study, trial, store, t0)
        except UpdateFinishedTrialError:
            self.progress.message(f"trial #{trial.number} was failed by another worker (its "
                                  "heartbeats were late); its result is discarded")
        except StudyError:
            raise
        except BaseException as exc:
            # Ctrl-C, or a bug of ours: never leave the trial RUNNING in the storage.
            interrupted = isinstance(exc, KeyboardInterrupt)
            failed = TrialOutcome(
                trial.number,
                failure=failures.INTERRUPTED if interrupted else failures.INTERNAL_ERROR,
                failure_message=("interrupted by the user (SIGINT)" if interrupted
                                 else f"{type(exc).__name__}: {exc}"[:2000]))
            try:
                write_outcome(trial, failed)
                study.tell(trial, state=TrialState.FAIL)
            except UpdateFinishedTrialError:
                pass
            raise

    def _skip(self, study: optuna.Study, trial: optuna.Trial, reason: str) -> None:
        """Give a claimed trial back without deploying: FAIL, which samplers ignore."""
        write_outcome(trial, TrialOutcome(trial.number, skipped=reason))
        study.tell(trial, state=TrialState.FAIL)
        self.live.finished(optuna_internals.stored_trial(study, trial))

    def _run_and_tell(self, study: optuna.Study, trial: optuna.Trial,
                      store: FileSystemArtifactStore, t0: float) -> None:
        plan = self.plan
        total = plan.trials
        now = count_trials(study)
        if over_budget(trial.number, now, total):
            self._skip(study, trial, "over budget: other workers claimed the last trials")
            return
        number = position(trial.number, now)
        params, flags = trial_flags(plan, trial, self._baseline)
        argv = tuple(flags)
        engine, verdict = self._engine_of(argv)
        same = duplicate_of(trial.number, engine or params_key(params), _claims(study))
        frozen = optuna_internals.stored_trial(study, trial)
        enqueued = optuna_internals.was_enqueued(frozen)
        again = same is not None and not same.failed
        while again and same.running and enqueued:  # a reference whose engine another slot is
            self.sleep(self.poll_s)  # measuring: wait for it, then copy what it measured
            reap_dead_workers(study, self.progress.message)  # or take it over if that slot died
            same = duplicate_of(trial.number, engine or params_key(params), _claims(study))
            again = same is not None and not same.failed
        if again and same.running:  # a busy engine, not a measured one: no sign of convergence
            self._skip(study, trial, f"same engine as #{same.number}; resampled")
            self.sleep(self.poll_s)
            return
        if again and not same.running:
            self._resamples += 1
            self._copy_engine(study, trial, params, argv, engine, same.number)
            return
        self._resamples = 0
        claim = TrialOutcome(
            trial.number, state="running", params=params,
            reference=frozen.user_attrs.get("reference", ""), model=plan.model.name,
            argv=argv, engine=engine,
            worker={"host": hostname(), "pid": os.getpid(), "label": self.label,
                    "slot": self.setup.slot.devices_text() if self.setup.slot else ""},
            duplicate_of=same.number if same is not None else None,
        )
        write_outcome(trial, claim)
        if same is not None and same.failed:
            self._copy_failure(study, trial, claim, study.get_trials(deepcopy=False)[same.number])
            self.live.finished(optuna_internals.stored_trial(study, trial))
            self._report(study, number, trial)
            return
        # Every trial gets the same prompts (a new server has an empty prefix cache), so
        # configurations are compared on identical work; repeats within a trial differ.
        # Balanced runs: the spread between deployments and their cost as measured so far.
        search = self.live.data(confirmed=False)
        setup, bench = trial_context(self.setup, plan.bench, TrialValues(
            model=plan.model.name,
            workdir=plan.workdir / "trials" / plan.study_name / f"trial-{trial.number:04d}",
            extra_env=((TRIAL_ENV, f"{uid(study)}:{trial.number}"),),
            validated=verdict,  # the trial does not ask vLLM again
            data=self.live.data() if plan.bench.balanced else None, search=search,
            race=plan.race, run_s=self._run_s(study, search)))
        measured = self._measure(claim.argv, bench, setup, number, trial.number)
        for path in measured.files:
            upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial)
        outcome = dataclasses.replace(claim.with_measurement(measured),
                                      trial_wall_s=round(self.clock() - t0, 3))
        values = self._store(trial, outcome)
        if values is None:
            study.tell(trial, state=TrialState.FAIL)
            raise StudyError(_stop_message(trial.number, outcome))
        study.tell(trial, values)
        self.live.finished(optuna_internals.stored_trial(study, trial))
        self._report(study, number, trial)
        if self._baseline is not None and claim.reference == self._baseline.name:
            self._calibrate(study)

    def _run_s(self, study: optuna.Study, search: StudyData) -> float | None:
        """The seconds the time budget leaves a trial's fixed runs (None: no budget, or no
        fixed run stops early): the time left, less the confirmation's reserve and the
        expected start. A configuration far slower than those measured (-O0 where the others
        compile) then stops its runs at their floor instead of outlasting the budget: its cost
        was not predictable from the others'."""
        left = time_left(study, self.plan, now=self.clock(), live=self.live)
        if left is None or not self.plan.bench.pinned:
            return None
        cost = trial_cost(search.outcomes)
        return left.left_s - left.reserve_s - (cost.start_s if cost is not None else 0.0)

    def _calibrate(self, study: optuna.Study) -> None:
        """With `run --calibrate`, right after the baseline is served, deploy it once more (stored as a
        confirmation deployment of it): the study's own spread between deployments from its start. Off
        by default (issue #46: the replay found it does not pay for itself, docs/noise.md): the spread
        is then inherited (this storage's studies, same conditions) or assumed, and learned from the
        confirmations. Skipped where every objective's spread is already known, or the time budget
        cannot afford it beside the confirmation's reserve."""
        plan = self.plan
        data = self.live.data()
        baseline = data.baseline
        if not plan.request.calibrate or baseline is None or not baseline.feasible:
            return
        if baseline.number in data.confirmed:
            return  # a resumed study: calibrated already
        if all(not data.noise.of(o.name).assumed for o in plan.objectives):
            self.progress.message("calibration: not needed, the spread between deployments is "
                                  f"already measured ({noise_line(data)})")
            return
        left = time_left(study, plan, now=self.clock(), live=self.live)
        cost = data.deployment_s or baseline.trial_wall_s or 0.0
        if left is not None and not left.affords(cost):
            self.progress.message(f"calibration skipped: redeploying the baseline "
                                  f"(~{duration_text(cost)}) does not fit ({left.text})")
            return
        tag = f"calibration: trial {baseline.label} deployed again"
        got = deploy_once(study, plan, self.setup, baseline, 1, trial_fn=self.trial_fn,
                          say=self.progress.message, tag=tag, live=self.live)
        if got:
            self.progress.message(f"{tag}: {noise_line(self.live.data())}")

    def _measure(self, argv: tuple[str, ...], bench: BenchSpec, setup: TrialSetup,
                 number: int, trial_number: int) -> Measurement:
        """The trial function's measurement; one that failed for a reason that is not the
        configuration's (the machine's or ours) is taken once more."""
        total = self.plan.trials

        def on_phase(phase: str) -> None:
            self.progress.phase(number, total, phase, trial_number)

        measured = self.trial_fn(argv, bench, setup, on_phase)
        if measured.failure is None or measured.failure.blames_configuration:
            return measured
        self.progress.message(f"trial #{trial_number}: {measured.failure.name} "
                              f"({failures.first_line(measured.failure_message, 200)}), not the "
                              "configuration's fault: running it once more")
        return self.trial_fn(argv, bench, setup, on_phase)

    def _store(self, trial: optuna.Trial, outcome: TrialOutcome) -> list[float] | None:
        """Write the outcome with its verdict's constraints; returns the objective values
        (None: a failure that is not the configuration's, nothing to tell the sampler)."""
        plan = self.plan
        verdict = what_to_tell(outcome, plan.objectives, plan.slos, plan.capacity_profiles)
        write_outcome(trial, verdict.outcome)
        for name, value in verdict.constraints.items():
            trial.set_constraint(name, value)
        optuna_internals.mirror_constraints(trial, list(verdict.constraints.values()))
        if verdict.values is None:
            return None
        told = [t.values for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.values and all(c <= 0 for c in t.constraints.values())]
        return finite_values(verdict.values, plan.objectives, told)  # never +inf: see verdict

    def _report(self, study: optuna.Study, number: int, trial: optuna.Trial) -> None:
        from optuna_dashboard import save_note  # here: it imports scikit-learn (1.5 s)

        # The numbers `pareto` shows: an earlier confirmation's included, where a resumed study has one.
        data = self.live.data()
        frozen = optuna_internals.stored_trial(study, trial)
        outcome = read_outcome(frozen)
        trial_number = trial.number
        try:
            with storage_errors("dashboard note not updated"):
                save_note(optuna_internals.live_trial(study, frozen),
                          trial_note(outcome, data))
                save_note(study, study_note(study.study_name, data, self.plan.request.smallest_difference))
        except StudyError as exc:  # another worker wrote it at the same moment
            self.progress.message(str(exc))
        front = sorted(t.number for t in data.front())
        self.progress.trial_done(number, self.plan.trials, outcome, front)
        if outcome.failure is failures.CONFIG_REJECTED:  # docs/studies.md, "The search"
            self.progress.message(
                f"trial #{trial_number}: rejected by vLLM, not deployed; not counted toward "
                f"--trials (at most {REJECTED_CAP} x --trials trials in all)")

    def _copy_failure(self, study: optuna.Study, trial: optuna.Trial, claim: TrialOutcome,
                      previous: FrozenTrial) -> None:
        """Record a parameter set that already failed without launching it again."""
        before = read_outcome(previous)
        write_outcome(trial, dataclasses.replace(
            claim, failure=before.failure, failure_message=before.failure_message,
            log_tail=before.log_tail, slo_violations=before.slo_violations))
        _tell_as(study, trial, previous)

    def _engine_of(self, argv: Sequence[str]) -> tuple[str, Validated | None]:
        """The engine ``argv`` resolves to ("" where it cannot be resolved here: no vLLM, or
        vLLM rejects the flags) and vLLM's verdict on them, which the trial takes as its
        validation (None: the trial validates, where it has a validator)."""
        if self.engine_id is not None:
            return self.engine_id(argv), None
        validator, model = self.setup.validator, self.plan.model.name
        if validator is None:
            return "", None
        verdict, engine = validated(model, argv, lambda: engine_identity(validator, model, argv))
        return engine or "", verdict

    def _copy_engine(self, study: optuna.Study, trial: optuna.Trial, params: dict,
                     argv: tuple[str, ...], engine: str, number: int) -> None:
        """Record a configuration whose engine trial ``number`` measured, without deploying
        it: that trial's values and constraints, told to the sampler so that it learns the
        region; a copy counts neither toward the budget nor in any analysis."""
        write_outcome(trial, TrialOutcome(trial.number, params=params, argv=argv, engine=engine,
                                          same_engine_as=number))
        _tell_as(study, trial, study.get_trials(deepcopy=False)[number])
        self.live.finished(optuna_internals.stored_trial(study, trial))
        self.progress.message(f"trial #{trial.number}: same engine as #{number}; not deployed, "
                              f"#{number}'s values told to the sampler")


def _tell_as(study: optuna.Study, trial: optuna.Trial, previous: FrozenTrial) -> None:
    """Finish ``trial`` with the values and constraints of ``previous``."""
    named = {k: v for k, v in previous.constraints.items() if not k.isdigit()}  # not the mirror
    for name, value in named.items():
        trial.set_constraint(name, value)
    optuna_internals.mirror_constraints(trial, list(named.values()))
    study.tell(trial, list(previous.values))


def _stop_message(trial_number: int, outcome: TrialOutcome) -> str:
    """Why the study stops: a trial failed twice, neither time through its configuration."""
    failure = outcome.failure
    assert failure is not None
    return (f"trial #{trial_number} failed twice for a reason that is not its configuration's "
            f"({failure.name}: {failures.first_line(outcome.failure_message, 200)}); the study stops: "
            f"{failure.remedy}")


def time_left(study: optuna.Study, plan: StudyPlan, *, now: float,
              live: LiveData) -> TimeLeft | None:
    """Where the study stands against its time budget (None without one): a trial's expected cost on
    the warm machine (``budget.expected_trial_s``; before any served trial, what the failed ones
    cost, a floor), and the confirmation's first round kept in reserve for the finalists in question
    now (``in_question``), at a measured engine's redeployment cost; later rounds get what the search
    leaves. Keeping every round in reserve cut a 5-minute CPU study to one served trial, whose
    confirmation then shrank to one round anyway. ``live``: the study's data in memory."""
    seconds, started = time_budget(study)
    if seconds is None:
        return None
    data = live.data(confirmed=False)
    cost = expected_trial_s(data.outcomes) or failed_deployment_cost_s(data.outcomes)
    again = data.deployment_s  # a redeployment's cost: the confirmation's
    reserve = 0.0
    if plan.confirm and again:  # as study.run.confirm_rounds picks them: those in question
        judged = live.data()
        chosen = [t.number for t in finalists(judged, plan.confirm)]
        reserve = len(in_question(judged, chosen)[0]) * again
    return TimeLeft(used_s=now - started, budget_s=seconds, trial_s=cost, reserve_s=reserve)
