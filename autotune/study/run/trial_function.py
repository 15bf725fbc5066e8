"""One trial: validate flags, deploy, warm up, benchmark every profile R times (a capacity
profile: search its load), tear down. ``run_trial`` is the real ``TrialFunction``. Short of an
interrupt it returns a ``Measurement`` and never raises: rejected flags, a failed start, a dead
engine, the machine's faults, a bug of ours each become a failure class with a message and the
log tail, and the server is gone on return. ``TrialSetup.deploy`` and ``TrialSetup.run_profile``
are its seams (tests pass stand-ins). Draws nothing; knows nothing of Optuna."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from autotune.core.deployment import failures
from autotune.core.deployment.failures import FailureClass
from autotune.core.deployment.slots import Slot
from autotune.core.deployment.startup import StartupPhases
from autotune.core.metrics.summary import RequestResult, flat_metrics, to_vllm_json
from autotune.core.plan.trial_context import BenchSpec
from autotune.core.trial.capacity_search import (
    MONOTONE_IN_LOAD,
    CapacitySearch,
    Incumbent,
    Probe,
    choose_incumbent,
    goodput_limits,
    search,
)
from autotune.core.trial.early_fail import SettleRule
from autotune.core.trial.outcome import Measurement, ProfileResult
from autotune.core.trial.precision import (
    RunStop,
    request_from_line,
    request_line,
)
from autotune.core.trial.racing import beaten, run_order
from autotune.core.workload.profiles import WorkloadProfile
from autotune.errors import BenchmarkError, DeploymentError, ValidationError, ValidationUnavailable
from autotune.shell.bench.client import BenchmarkRun, Target, run_profile
from autotune.shell.server.hardware import hardware_description
from autotune.shell.server.install import Entrypoint, resolve_entrypoint, vllm_version
from autotune.shell.server.preimported import Preimported
from autotune.shell.server.server import DeploymentSpec, ServerProcess, TeardownReport, exported_environment
from autotune.shell.server.validation import VllmValidator


class Served(Protocol):
    """What a trial needs of a deployment (``shell.server.server.ServerProcess``): a context manager
    that is ready on entry and gone on exit."""

    url: str
    model_name: str
    api_key: str
    startup_s: float
    teardown: TeardownReport | None

    def __enter__(self) -> Served: ...
    def __exit__(self, *exc: object) -> None: ...
    def is_serving(self) -> bool: ...
    def diagnose(self, symptom: str) -> DeploymentError: ...
    def gpu_used_mib(self) -> int | None: ...
    def phases(self) -> StartupPhases | None: ...


_T = TypeVar("_T")
Phase = Callable[[str], None]
Deploy = Callable[..., Served]  # (spec: DeploymentSpec, on_phase=...) -> Served
ProfileRunner = Callable[..., BenchmarkRun]  # runs one profile on a server: shell.bench.client.run_profile


@dataclass(frozen=True)
class Validated:
    """vLLM's verdict on ``options`` for ``model``, reached before the trial (the runner
    resolves every drawn configuration's engine through the same checks): the trial takes it
    instead of asking vLLM again. ``rejected``: vLLM's message; ``unavailable``: why vLLM
    could not check the flags here (it checks them as the server starts)."""

    model: str
    options: tuple[str, ...]
    rejected: str = ""
    unavailable: str = ""


@dataclass(frozen=True)
class TrialSetup:
    """Where and how a trial deploys, and (seams) what deploys and benchmarks."""

    model: str
    workdir: Path  # the trial's own folder: server log, benchmark JSONs
    slot: Slot | None = None
    entrypoint: Entrypoint | None = None
    startup_timeout_s: float = 600.0
    validator: VllmValidator | None = None
    validated: Validated | None = None  # the verdict already reached (None: the trial validates)
    extra_env: tuple[tuple[str, str], ...] = ()  # e.g. the trial marker the reaper looks for
    launcher: Preimported | None = None  # forks each server with vLLM imported (None: new processes)
    deploy: Deploy = ServerProcess
    run_profile: ProfileRunner = run_profile


TrialFunction = Callable[[Sequence[str], "BenchSpec", "TrialSetup", Phase], Measurement]


def _write(path: Path, payload: dict, files: list[Path]) -> None:
    path.write_text(json.dumps(payload, indent=2) + "\n")
    files.append(path)


def write_requests(path: Path, run: BenchmarkRun, files: list[Path]) -> None:
    """The run's per-request records, one JSON line each in send order (times from its first
    send): the artifact from which ``precision.recheck`` recomputes its stop."""
    if not run.requests:
        return
    t0 = min(r.start_s for r in run.requests)
    path.write_text("".join(json.dumps(request_line(r, t0)) + "\n" for r in run.requests))
    files.append(path)


def read_requests(path: Path) -> list[RequestResult]:
    """The per-request records of a ``requests-<profile>-<repeat>.jsonl`` artifact."""
    return [request_from_line(json.loads(line)) for line in path.read_text().splitlines() if line]


def _search_capacity(dep: Served, profile: WorkloadProfile, *, run_profile: ProfileRunner, target: Target,
                     bench: BenchSpec, seed: int, results: Mapping[str, ProfileResult], workdir: Path,
                     on_phase: Phase, files: list[Path]) -> CapacitySearch:
    """Probe loads on this deployment until the search finds the boundary."""
    spec = profile.capacity
    assert spec is not None
    slo = goodput_limits(spec)
    count = 0

    def measure(load: float, why: str, settle: SettleRule | None) -> Probe:
        nonlocal count
        count += 1
        on_phase(f"capacity {profile.name}: probe {count} at {load:g} {spec.unit} ({why})")
        at = profile.at_load(load)
        planned = at.num_prompts
        stop = None if settle is None else (lambda done: bool(settle.settled(done, planned)))
        run = run_profile(target, at, seed=seed + count, source=bench.sources[profile.name], slo=slo,
                          stop=stop)
        measured = len(run.requests) or run.summary.completed + run.summary.failed
        settled = settle.settled(run.requests, planned) if settle and measured < planned else ""
        if settled:
            on_phase(f"capacity {profile.name}: probe {count} settled after {measured} of "
                     f"{planned} requests ({settled})")
        _write(workdir / f"bench-{profile.name}-probe-{count}.json",
               {"profile": profile.name, "load": load, "seed": seed + count,
                "planned_requests": planned, "settled": settled, **to_vllm_json(run.summary)}, files)
        if not run.summary.valid and not dep.is_serving():
            raise _InvalidRun(f"{profile.name} at {load:g}: {run.summary.invalid_reason}")
        return Probe(load, flat_metrics(run.summary), measured, planned, settled)

    around = bench.around.get(profile.name)
    found = search(profile.name, spec, measure,
                   None if around is not None else incumbent_for(profile, bench, results), around)
    _write(workdir / f"capacity-{profile.name}.json", found.to_dict(), files)
    return found


def incumbent_for(profile: WorkloadProfile, bench: BenchSpec,
                  results: Mapping[str, ProfileResult]) -> Incumbent | None:
    """The incumbent a capacity search starts from, given this trial's fixed profiles: only
    when the profile's objectives all grow with the load (so failing at the incumbent's load
    means carrying less)."""
    own = {o.name: o.cost(results[o.profile].mean(o.metric)) for o in bench.objectives
           if o.profile != profile.name and o.profile in results}
    if not all(o.metric in MONOTONE_IN_LOAD for o in bench.objectives if o.profile == profile.name):
        return None
    return choose_incumbent(bench.incumbents.get(profile.name, ()), own)


@dataclass(frozen=True)
class DeploymentResults:
    """What benchmarking one deployment gave."""

    results: dict[str, ProfileResult]
    searches: dict[str, CapacitySearch]
    raced: str = ""  # why the remaining runs were skipped (beaten beyond the noise)


def _benchmark(dep: Served, run_profile: ProfileRunner, bench: BenchSpec, workdir: Path, on_phase: Phase,
               files: list[Path]) -> DeploymentResults:
    target = Target(url=dep.url, model=dep.model_name, api_key=dep.api_key)
    index = {p.name: i for i, p in enumerate(bench.profiles)}
    fixed = {p.name: p for p in bench.profiles if p.capacity is None}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in fixed}
    stops: dict[str, list[RunStop]] = {name: [] for name in fixed}
    results: dict[str, ProfileResult] = {}
    raced = ""
    # Fixed profiles first (a capacity search compares them with its incumbents'), one run of
    # each before any repeat, the cheapest first: the first runs can end a race.
    for name, r in run_order(list(fixed), bench.repeats, bench.run_seconds):
        profile = fixed[name]
        on_phase(f"benchmarking {name}" + (f" (repeat {r + 1}/{bench.repeats})" if bench.repeats > 1 else ""))
        # A fresh prompt seed per profile and repeat: prefix caching cannot fake a result.
        seed = bench.seed * 1000 + index[name] * 100 + r
        pinned = bench.pinned.get(name)
        run = run_profile(target, profile, seed=seed, source=bench.sources[name],
                          **({"until": pinned} if pinned is not None else {}))
        ended = run.stop.to_dict() if run.stop is not None else {}
        _write(workdir / f"bench-{name}-{r + 1}.json",
               {"profile": name, "seed": seed, "repeat": r + 1, **ended,
                **to_vllm_json(run.summary)}, files)
        write_requests(workdir / f"requests-{name}-{r + 1}.jsonl", run, files)
        if run.stop is not None:
            stops[name].append(run.stop)
            on_phase(f"{name}: {run.stop.requests} requests ({run.stop.reason})"
                     + (f", {run.stop.reached_text}" if run.stop.short_of_load else ""))
        if not run.summary.valid:
            raise _InvalidRun(f"{name}: {run.summary.invalid_reason}")
        runs[name].append(flat_metrics(run.summary))
        results = {n: ProfileResult(n, tuple(v), tuple(stops[n]) if len(stops[n]) == len(v) else ())
                   for n, v in runs.items() if v}
        raced = beaten(bench.race, results) if bench.race is not None else ""
        if raced:
            on_phase(f"stopped: {raced}")
            return DeploymentResults(results, {}, raced)
    searches: dict[str, CapacitySearch] = {}
    for profile in bench.profiles:
        if profile.capacity is None:
            continue
        found = _search_capacity(dep, profile, run_profile=run_profile, target=target, bench=bench,
                                 seed=bench.seed * 1000 + index[profile.name] * 100, results=results,
                                 workdir=workdir, on_phase=on_phase, files=files)
        searches[profile.name] = found
        if found.boundary.found:
            results[profile.name] = ProfileResult(profile.name, tuple(found.runs_at_boundary()))
    return DeploymentResults(results, searches)


class _InvalidRun(Exception):
    pass


def run_trial(
    options: Sequence[str], bench: BenchSpec, setup: TrialSetup,
    on_phase: Phase = lambda phase: None,
) -> Measurement:
    """Run one configuration end to end; the server is gone when this returns. Only an
    interrupt escapes: any other failure is the measurement's class and message."""
    t0 = time.monotonic()
    log_path = setup.workdir / "server.log"
    files: list[Path] = []
    dep: Served | None = None
    failure: FailureClass | None = None
    message = log_tail = ""
    benchmarked = DeploymentResults({}, {})
    bench_s = 0.0
    gpu_mib: int | None = None
    phases = None
    try:
        setup.workdir.mkdir(parents=True, exist_ok=True)
        _validate(options, setup, on_phase)
        dep = setup.deploy(DeploymentSpec(
            model=setup.model, options=tuple(options), slot=setup.slot,
            entrypoint=setup.entrypoint, startup_timeout_s=setup.startup_timeout_s,
            log_path=log_path, extra_env=setup.extra_env, launcher=setup.launcher,
        ), on_phase=on_phase)
        with dep:
            b0 = time.monotonic()
            try:
                gpu_mib = dep.gpu_used_mib()
                benchmarked = _benchmark(dep, setup.run_profile, bench, setup.workdir, on_phase, files)
            except _InvalidRun as exc:
                if not dep.is_serving():
                    err = dep.diagnose(str(exc))
                    failure, message, log_tail = err.failure, err.failure_message, err.log_tail
                else:
                    failure, message = failures.BENCHMARK_INVALID, str(exc)
            bench_s = time.monotonic() - b0
    except Exception as exc:  # noqa: BLE001 - every failure becomes a class (_failure_of)
        failure, message, log_tail = _failure_of(exc)
    try:  # what the deployment left: its start-up phases and its log (after a failure too)
        phases = dep.phases() if dep is not None else None
        if log_path.is_file():
            files.append(log_path)
    except Exception as exc:  # noqa: BLE001
        if failure is None:
            failure, message, log_tail = _failure_of(exc)
    report = dep.teardown if dep is not None else None
    return Measurement(
        failure=failure, failure_message=message, log_tail=log_tail,
        startup_s=dep.startup_s if dep is not None and dep.startup_s else None,  # 0: never ready
        startup_phases=phases.as_dict() if phases else {},
        bench_s=bench_s, wall_s=time.monotonic() - t0,
        results=benchmarked.results if not failure else {},
        capacity=benchmarked.searches if not failure else {}, raced=benchmarked.raced if not failure else "",
        gpu_memory_mib=gpu_mib,
        # A deployment made but never torn down may have left its server: not clean.
        files=tuple(files), teardown_clean=report.clean if report else dep is None,
        teardown_s=report.seconds if report else 0.0,
        vllm_version=vllm_version(), hardware=hardware_description(),
        **launch_of(setup),
    )


def launch_of(setup: TrialSetup) -> dict[str, Any]:
    """How ``setup``'s servers start, as a trial records it for its export: the entry point's
    words before the model, and the variables of the server's environment that change it."""
    env = ServerProcess(DeploymentSpec(model=setup.model, slot=setup.slot,
                                       extra_env=setup.extra_env)).environment()
    return {"entrypoint": (setup.entrypoint or resolve_entrypoint()).argv,
            "server_env": exported_environment(env)}


def _validate(options: Sequence[str], setup: TrialSetup, on_phase: Phase) -> None:
    """vLLM's own parser on the flags (ValidationError: rejected), or its verdict on these
    very flags reached before the trial; where the installed vLLM's parser cannot be found,
    vLLM checks them as the server starts."""
    verdict = setup.validated
    if verdict is None or (verdict.model, verdict.options) != (setup.model, tuple(options)):
        if setup.validator is None:
            return
        on_phase("validating")
        validator = setup.validator
        verdict, _ = validated(setup.model, options, lambda: validator.check(setup.model, options))
    if verdict.rejected:
        raise ValidationError(verdict.rejected)
    if verdict.unavailable:
        on_phase(f"not validated before launch: {verdict.unavailable}")


def validated(model: str, options: Sequence[str], check: Callable[[], _T]) -> tuple[Validated, _T | None]:
    """vLLM's verdict on ``options`` for ``model`` from ``check`` (one of vLLM's checks of
    them), and what the check returned where vLLM accepted them."""
    try:
        found = check()
    except ValidationError as exc:
        return Validated(model, tuple(options), rejected=str(exc)), None
    except ValidationUnavailable as exc:
        return Validated(model, tuple(options), unavailable=str(exc)), None
    return Validated(model, tuple(options)), found


def _failure_of(exc: Exception) -> tuple[FailureClass, str, str]:
    """The failure class, message and log tail of an exception that ended a trial."""
    if isinstance(exc, ValidationError):
        return failures.CONFIG_REJECTED, f"vLLM rejected the flags: {exc}", ""
    if isinstance(exc, DeploymentError):
        return exc.failure, exc.failure_message, exc.log_tail
    if isinstance(exc, BenchmarkError):  # the same for every configuration: ours to fix
        return failures.INTERNAL_ERROR, f"the benchmark could not run: {exc}", ""
    if isinstance(exc, OSError):  # the machine's: a full disk, a port taken
        return failures.HOST_FAULT, f"{type(exc).__name__}: {exc}", ""
    return failures.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", ""  # a bug of ours
