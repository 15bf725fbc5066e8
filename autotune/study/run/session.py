"""One study session: the plan, this node (its slots, vLLM's parser as the validator, the
pre-imported launcher), the open study and its data in memory. `run`, `worker`, `confirm` and
`export --verify` are thin calls on it: the command line says what to do, the session does the
lifecycle (plan → node → work or confirm → the study's data at the end) once for all of them."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import optuna

from autotune.core.analysis.study_data import StudyData
from autotune.core.deployment.slots import Slot, slots_for
from autotune.core.maths.platforms import CPU
from autotune.core.plan.confirmation import CONFIRM_ROUNDS
from autotune.core.plan.estimate import UNBOUNDED_TRIALS, RunEstimate, assumed_cost, measured_cost
from autotune.core.plan.trial_context import BenchSpec
from autotune.core.space.search_space import SearchSpace
from autotune.core.trial.outcome import Measurement, TrialOutcome
from autotune.errors import ConfigError, ValidationUnavailable
from autotune.shell.bench.files import read_model_info
from autotune.shell.bench.workloads import load_tokenizer, sources_for
from autotune.shell.server.install import Entrypoint, detect_platform, vllm_version
from autotune.shell.server.preimported import Preimported
from autotune.shell.server.validation import VllmValidator, shared_validator
from autotune.study.run.confirm_rounds import confirm
from autotune.study.run.live_data import LiveData
from autotune.study.run.runner import Progress, SilentProgress, StudyRunner
from autotune.study.run.study_plan import StudyPlan
from autotune.study.run.study_setup import prepare_study
from autotune.study.run.trial_function import TrialFunction, TrialSetup, run_trial
from autotune.study.run.worker_upkeep import count_trials
from autotune.study.store.records import outcomes, study_data
from autotune.study.store.state import read_plan, start_clock, time_budget
from autotune.study.store.storage import STORAGE_ENV, Heartbeat, load_existing, redact, sqlite_path, study_names

DRY_RUN_SAMPLES = 5  # sampled trials a dry run shows when the time budget decides the count

Say = Callable[[str], None]


def vllm_validator(space: SearchSpace, say: Say) -> tuple[VllmValidator | None, SearchSpace]:
    """vLLM's own parser as the validator of ``space``'s flags, and the space as the installed
    vLLM takes it (what it lacks is said once and left out); no validator where vLLM cannot be
    imported or asked (said)."""
    validator = shared_validator()  # the one a --baseline was read with: its parser built once
    if validator is None:
        return None, space
    try:
        space, notes = validator.restrict(space, vllm_version())
    except ValidationUnavailable as exc:
        say(f"flags are not checked by vLLM's parser here: {exc}")
        return None, space
    for note in notes:
        say(note)
    return validator, space


def cpu_slot(tp: int, kv_cache_gib: float) -> Slot:
    """One slot over every core this process may use, split evenly between the TP ranks."""
    return slots_for(CPU, tp, os.sched_getaffinity(0), kv_cache_gib=kv_cache_gib)[0]


@dataclass(frozen=True)
class Node:
    """Where this node deploys, as the command line says: its slots (several: one worker
    process each), the entry point, whether servers fork from a pre-imported vLLM, the
    heartbeat settings, and the options a slot's worker process is started with."""

    slots: tuple[Slot, ...]
    entrypoint: Entrypoint | None = None
    preimport: bool = True
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    worker_options: tuple[str, ...] = ()


@dataclass
class StudySession:
    """A plan on this node: ``setup`` is where its trials deploy (the first slot, the
    validator, the launcher), ``plan`` the plan as the installed vLLM's parser takes it.
    ``live``: the study's data in memory once a worker or a confirmation has opened it;
    ``trial_fn``: what deploys and measures a configuration (``run_trial``); ``figures``: the
    dashboard's figures drawn after a confirmation (off: tests whose subject they are not)."""

    plan: StudyPlan
    node: Node
    setup: TrialSetup
    say: Say
    live: LiveData | None = None
    trial_fn: TrialFunction = run_trial  # the seam: a stand-in or a replay in tests
    figures: bool = True

    @classmethod
    @contextlib.contextmanager
    def on_this_node(cls, plan: StudyPlan, node: Node, *, say: Say, dry_run: bool = False
                     ) -> Iterator[StudySession]:
        """The session, with vLLM's parser as the validator and (unless ``node.preimport`` is
        off) the launcher that imports vLLM once for all deployments: started here where this
        process deploys (one slot, not a dry run), so that its imports run while the parser
        loads and the study is prepared; with several slots each worker process has its own,
        and this one starts only if it deploys (a confirmation). Ended with the session."""
        from autotune.shell.server.server import preimported_launcher

        launcher: Preimported | None = None if not node.preimport else preimported_launcher(
            node.entrypoint, on_failure=lambda why: say(
                f"the pre-imported launcher cannot be used ({why}): deployments start as new "
                "processes"),
            on_skipped=lambda names: say(
                f"the pre-imported launcher skips {', '.join(names)}: not in this vLLM"))
        try:
            if launcher is not None and len(node.slots) == 1 and not dry_run:
                launcher.start()
            validator, space = vllm_validator(plan.space, say)
            plan = dataclasses.replace(plan, space=space)
            setup = plan.trial_setup(slot=node.slots[0], entrypoint=node.entrypoint,
                                     validator=validator, launcher=launcher)
            yield cls(plan, node, setup, say)
        finally:
            if launcher is not None:
                launcher.close()

    def create(self, started: float) -> tuple[list[str], bool]:
        """Create the study, or join it; its time budget counts from ``started``. Returns the
        notes for the user and whether this call created it."""
        self.plan.workdir.mkdir(parents=True, exist_ok=True)
        study, notes, created = prepare_study(self.plan, self.node.heartbeat)
        start_clock(study, started)
        return notes, created

    def work(self, *, label: str = "", progress: Progress | None = None) -> int:
        """Run the study's trials: in this process for one slot, one worker process per slot
        otherwise (each restricts the plan to its own vLLM). Returns the exit code."""
        from autotune.shell.server.worker_pool import run_workers

        plan = self.plan
        self.plan.workdir.mkdir(parents=True, exist_ok=True)
        if len(self.node.slots) > 1:
            self.live = None  # other processes write the study
            return run_workers(self.node.slots, workdir=plan.workdir, study=plan.study_name,
                               env={STORAGE_ENV: plan.storage}, label=label,
                               options=self.node.worker_options, message=self.say)
        runner = StudyRunner(plan, self.setup, trial_fn=self.trial_fn,
                             progress=progress or SilentProgress(),
                             heartbeat=self.node.heartbeat, label=label)
        runner.work()
        self.live = runner.live
        return 0

    def confirm(self, *, k: int, trials: Sequence[int] | None = None,
                rounds: int = CONFIRM_ROUNDS, budget_s: float | None = None,
                study_budget: bool = False) -> list[int]:
        """Confirm the finalists (or ``trials``) inside ``budget_s`` seconds from now (`confirm
        --time-budget`), or with ``study_budget`` (`run`) inside what is left of the study's
        time budget, if it has one. Returns the trials confirmed."""
        plan = self.plan
        study = load_existing(plan.study_name, plan.storage, writable=True)
        end: float | None = None if budget_s is None else time.time() + budget_s
        if study_budget:
            seconds, started = time_budget(study)
            end = None if seconds is None else started + seconds
        live = self._synced() or LiveData.open(study)
        confirmed = confirm(study, plan, self.setup, k=k, trials=trials, rounds=rounds,
                            trial_fn=self.trial_fn,
                            say=self.say, budget_end=end, only_open=study_budget, live=live,
                            figures=self.figures)
        self.live = live
        return sorted(confirmed)

    def data(self) -> StudyData:
        """The study's data as `trials` and `pareto` show it (confirmations included): from
        memory where this process ran the study alone, else read once."""
        live = self._synced()
        if live is not None:
            return live.data()
        return study_data(load_existing(self.plan.study_name, self.plan.storage))


    def dry_run(self) -> list[str]:
        """What `run --dry-run` prints: the exploration order, each planned trial's command
        with vLLM's verdict on its flags, whether the study is created or resumed and how long
        it would take. Launches nothing, writes nothing."""
        import shlex

        from autotune.study.run.space_check import check_planned, checkable_model, dry_run_verdicts
        from autotune.study.run.study_setup import dry_run_argv

        plan = self.plan
        refs = ((len(plan.references.configs) if plan.references else 0)
                + (plan.baseline is not None) + len(plan.exploration))
        # A time budget without a trial count decides the count as it goes: show the references
        # and the first sampled trials, not the unbounded budget's ten thousand.
        bounded = plan.trials < UNBOUNDED_TRIALS
        shown = plan.trials if bounded else refs + DRY_RUN_SAMPLES
        with checkable_model(plan.model.name) as model:
            checks = check_planned(self.setup.validator, model, dry_run_argv(plan, shown))
        lines = [plan.exploration_text]
        for c in checks:
            lines.append(f"{c.label}: {shlex.join(['vllm', 'serve', plan.model.name, *c.argv])}")
            if c.rejected:
                lines.append(f"  rejected by vLLM: {c.rejected}")
        lines.append(dry_run_verdicts(checks, plan.trials if bounded else None))
        if shown < plan.trials:
            lines.append(f"... then sampled trials until the time budget ends ({shown} shown)")
        return [*lines, *resume_and_length(plan, len(self.node.slots)),
                "dry run: nothing launched, nothing written"]

    def _synced(self) -> LiveData | None:
        """The data in memory, read again where another node may have written since."""
        if self.live is not None:
            self.live.sync(count_trials(self.live.study))
        return self.live


def resume_and_length(plan: StudyPlan, slots: int) -> list[str]:
    """A dry run's last lines: whether `run` would create the study or resume it ('resumes
    study X: N trials done'), and how long it would take, at the cost of a deployment this
    study measured, else another study of the same model in the storage, else the platform's
    prior (``core.plan.estimate``). Reads the storage only; a storage not there is a new one."""
    path = sqlite_path(plan.storage)
    names = [] if path is not None and not path.exists() else study_names(plan.storage)
    where, name = redact(plan.storage), plan.study_name
    done, calibrated, cost = 0, False, None
    if name in names:
        study = load_existing(name, plan.storage)
        counts = count_trials(study)
        done, data = counts.finished, study_data(study)
        calibrated = data.baseline is not None and data.baseline.number in data.confirmed
        rejected = f", {counts.rejected} rejected by vLLM (not counted)" if counts.rejected else ""
        running = f", {len(counts.running)} running" if counts.running else ""
        first = (f"resumes study {name!r} in {where}: {done} trial{'s' * (done != 1)} done"
                 f"{rejected}{running}")
        cost = measured_cost(data.outcomes, "of this study")
    else:
        first = f"creates study {name!r} in {where}"
    if cost is None:
        same = [t for other in names if other != name
                for t in outcomes(load_existing(other, plan.storage)) if t.model == plan.model.name]
        cost = measured_cost(same, f"of other studies of {plan.model.name} in this storage")
    unbounded = plan.trials >= UNBOUNDED_TRIALS
    finalists = plan.confirm + (plan.baseline is not None) if plan.confirm else 0
    estimate = RunEstimate(
        trials=None if unbounded else max(plan.trials - done, 0), slots=slots,
        calibration=int(plan.request.calibrate and plan.baseline is not None and not calibrated),
        confirmation=finalists * CONFIRM_ROUNDS, budget_s=plan.time_budget_s,
        cost=cost or assumed_cost(plan.ctx.platform))
    return [first, estimate.text]


def relaunch(study: optuna.Study, trial: TrialOutcome, flags: Sequence[str], model: str, *,
             workdir: Path, say: Say) -> Measurement:
    """`export --verify`: deploy the exported ``flags`` of ``trial`` once more on this node
    (the CPU build) and benchmark the study's profiles again, under the study's start-up
    timeout, as its trials had."""
    stored = read_plan(study)
    if stored is None or not stored.profiles:
        raise ConfigError(f"study {study.study_name!r} does not record its profiles; cannot verify")
    if detect_platform() != "cpu":
        raise ConfigError("--verify runs on the CPU build here; on GPUs use `autotune confirm`")
    tp = int(flags[list(flags).index("--tensor-parallel-size") + 1])
    setup = TrialSetup(model=model, workdir=workdir / "verify" / f"trial-{trial.number}",
                       slot=cpu_slot(tp, 1.0),  # entrypoint None: resolved as for any deployment
                       startup_timeout_s=stored.startup_timeout_s)
    profiles, sources = sources_for(stored.profiles, vocab_size=read_model_info(model).vocab_size,
                                    tokenizer=load_tokenizer(model),
                                    max_model_len=stored.max_model_len or 1 << 30)
    return run_trial(flags, BenchSpec(profiles=profiles, sources=sources, seed=10_000), setup,
                     on_phase=lambda ph: say(f"verify: {ph}"))
