"""The study runner: an Optuna multi-objective study whose trials are real deployments.

Ask/tell loop over ``study.trial.run_trial``. Reference configs are enqueued once per study;
a failed or infeasible trial is stored as COMPLETE with constraint ``served > 0`` violated
(so the sampler learns to avoid the region) and values (0 tok/s, inf ms); a parameter set
identical to an infeasible one is not relaunched; SIGINT tears the server down and marks the
trial FAIL (interrupted). Printing is left to the caller through ``Progress``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.trial import FrozenTrial, TrialState
from optuna_dashboard import save_note

from autotune.core.flags import to_argv
from autotune.core.model_info import ModelInfo
from autotune.core.objectives import (
    Slo,
    directions,
    infeasible_values,
    metric_names,
    objective_values,
)
from autotune.core.space import (
    ModelContext,
    Params,
    ReferenceSet,
    SearchSpace,
    resolve_references,
    sample,
)
from autotune.errors import FailureClass, StudyError
from autotune.shell.server import vllm_version
from autotune.shell.validation import VllmValidator
from autotune.study.notes import mirror_constraints, study_note, trial_note
from autotune.study.records import baseline_of, feasible, records, to_record
from autotune.study.trial import BenchPlan, TrialOutcome, TrialSetup, run_trial

optuna.logging.set_verbosity(optuna.logging.WARNING)
# Metric names and grouped TPE are stable enough for us; the warnings only confuse users.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

FEASIBLE = "served"  # constraint: > 0 when the trial did not deliver a valid measurement
REFS_ENQUEUED = "references_enqueued"


@dataclass(frozen=True)
class StudyPlan:
    """Everything `autotune run` decided before the first trial."""

    model: ModelInfo
    space: SearchSpace
    bench: BenchPlan
    trials: int  # study-wide budget of finished trials
    study_name: str
    storage: str
    workdir: Path  # artifacts and per-trial folders
    max_model_len: int
    references: ReferenceSet | None = None
    seed_references: bool = False
    seed: int | None = None
    slos: tuple[Slo, ...] = ()
    setup_defaults: TrialSetup | None = None  # slot, entrypoint, timeout; model/workdir set per trial

    @property
    def profile_names(self) -> list[str]:
        return [p.name for p in self.bench.profiles]

    @property
    def ctx(self) -> ModelContext:
        return ModelContext(self.model, self.max_model_len)


class Progress(Protocol):
    """What the runner reports; the CLI prints it."""

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
    expensive trials, constraint-aware through ``Trial.set_constraint``, reproducible."""
    return optuna.samplers.TPESampler(
        seed=seed, multivariate=True, group=True, n_startup_trials=5, constant_liar=True,
    )


def open_study(plan: StudyPlan) -> optuna.Study:
    """Create or load the study; refuses a study whose objectives differ from the plan's."""
    sampler = make_sampler(plan.seed)
    try:
        study = optuna.create_study(
            study_name=plan.study_name, storage=plan.storage, sampler=sampler,
            directions=directions(plan.profile_names), load_if_exists=True,
        )
    except (KeyError, ValueError) as exc:
        raise StudyError(f"--storage {plan.storage!r}: cannot open study "
                         f"{plan.study_name!r}: {exc}") from exc
    names = metric_names(plan.profile_names)
    if study.metric_names is None:
        study.set_metric_names(names)
    elif study.metric_names != names:
        raise StudyError(
            f"study {plan.study_name!r} has objectives {study.metric_names}, this run asks for "
            f"{names}; use the same --profile list or another --study name"
        )
    return study


def enqueue_references(study: optuna.Study, plan: StudyPlan) -> list[str]:
    """Enqueue the applicable references once per study; returns messages for skipped ones."""
    if not (plan.seed_references and plan.references):
        return []
    if study.user_attrs.get(REFS_ENQUEUED):
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


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def _previous_failure(study: optuna.Study, key: str, number: int) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.number != number and t.user_attrs.get("params_key") == key and t.user_attrs.get(
            "failure_class"
        ):
            return t
    return None


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
    """Runs trials until the study holds ``plan.trials`` finished ones."""

    plan: StudyPlan
    progress: Progress = field(default_factory=SilentProgress)
    validator: VllmValidator | None = None

    def run(self) -> optuna.Study:
        plan = self.plan
        study = open_study(plan)
        for note in enqueue_references(study, plan):
            self.progress.message(note)
        store_dir = plan.workdir / "artifacts"
        store_dir.mkdir(parents=True, exist_ok=True)
        store = FileSystemArtifactStore(str(store_dir))
        study.set_user_attr("model", plan.model.name)
        study.set_user_attr("space", plan.space.path)
        study.set_user_attr("profile_specs", [dataclasses.asdict(p) for p in plan.bench.profiles])
        study.set_user_attr("vocab_size", plan.bench.vocab_size)
        while (done := finished_count(study)) < plan.trials:
            self._one_trial(study, store, done + 1)
        return study

    def _one_trial(self, study: optuna.Study, store: FileSystemArtifactStore, number: int) -> None:
        t0 = time.monotonic()
        trial = study.ask()
        try:
            self._run_and_tell(study, trial, store, number, t0)
        except BaseException as exc:
            # Ctrl-C, or a bug of ours: never leave the trial RUNNING in the storage.
            interrupted = isinstance(exc, KeyboardInterrupt)
            failure = FailureClass.INTERRUPTED.value if interrupted else "internal_error"
            message = ("interrupted by the user (SIGINT)" if interrupted
                       else f"{type(exc).__name__}: {exc}")
            trial.set_user_attr("failure_class", failure)
            trial.set_user_attr("failure_message", message[:2000])
            study.tell(trial, state=TrialState.FAIL)
            raise

    def _run_and_tell(self, study: optuna.Study, trial: optuna.Trial,
                      store: FileSystemArtifactStore, number: int, t0: float) -> None:
        plan = self.plan
        total = plan.trials
        params = sample(plan.space, plan.ctx, trial)
        argv = to_argv(plan.space, plan.ctx, params)
        key = params_key(params)
        trial.set_user_attr("params_key", key)
        trial.set_user_attr("argv", argv)
        trial.set_user_attr("vllm_version", vllm_version())
        trial.set_user_attr("hardware", hardware_description())
        trial.set_user_attr("model", plan.model.name)
        previous = _previous_failure(study, key, trial.number)
        if previous is not None:
            self._copy_failure(study, trial, previous)
            self._report(study, number, trial.number)
            return
        base = plan.setup_defaults or TrialSetup(model=plan.model.name, workdir=plan.workdir)
        setup = TrialSetup(
            model=plan.model.name, workdir=plan.workdir / "trials" / plan.study_name /
            f"trial-{trial.number:04d}", slot=base.slot, entrypoint=base.entrypoint,
            startup_timeout_s=base.startup_timeout_s, validator=self.validator,
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
        self._write_notes(study, trial_number)
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


