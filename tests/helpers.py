"""What the tests share: stand-ins for vLLM and study builders, in one place.

Stand-ins (each says what it stands in for; none is used by a test that claims to test a
deployment, which uses a real vLLM server on a generated model, tests/conftest.py):

- ``StandInDeployment`` and ``StandInBench``: ``shell.server.server.ServerProcess`` and
  ``shell.bench.client.run_profile`` behind ``TrialSetup``'s seams, injecting faults a real server
  cannot be made to produce on demand (test_trial.py);
- ``StandIn``: a trial function (the runner's ``trial_fn`` seam) computed from the flags with
  seeded noise: MTP helps at low concurrency and hurts at high, -O0 halves everything, expert
  parallel crashes the engine (as on the CPU build);
- ``Said``: the runner's progress, keeping what it says.

Shared values (tests import them from here, never from conftest, which holds fixtures only):
``REPO``, ``SPACES``, the model configs, ``cpu_slot`` (a real CPU slot of this machine),
the real study's space and command line (``REAL_STUDY_*``, ``autotune``, ``run_args``) and
``stand_in_http`` (an aiohttp server standing in for vLLM's HTTP side).

Study builders:

- ``make_plan`` and ``run``: a small space (``SPACE``, ``REFERENCES``) on a config-only MoE
  model, run through the real ``StudyRunner`` with a trial function, on the plan's SQLite file
  or (``run_in_memory``) on Optuna's in-memory storage; ``o2_o3_plan``: two references that
  resolve to one engine (``o3_is_o2``); ``copy_searched``: a copy of a 6-trial search run
  once a process through conftest's ``built_once``; ``copy_tied``: a copy of the tied references'
  study (``TIED_REFS``, ``MtpDoesNothing``), run once a process through conftest's
  ``built_once``;
- ``store`` with ``served``/``failed``/``with_capacity``: stored studies as `autotune run`
  stores them (each trial's ``TrialOutcome`` through ``records.write_outcome``, the plan through
  ``state.write_plan``, into a real SQLite file), for the reading commands' tests; only the
  deployments are not made, their numbers are given, so a test can state what the commands
  must print.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
from aiohttp import web
from optuna.distributions import CategoricalDistribution
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from autotune.core.analysis.table import NOT_REACHED, fill_unreached, parse_csv
from autotune.core.deployment import failures
from autotune.core.metrics.summary import RequestResult, summarize
from autotune.core.plan.study_request import StudyRequest
from autotune.core.trial.capacity_search import Boundary, CapacitySearch, Probe
from autotune.core.trial.objectives import parse_objective
from autotune.core.trial.outcome import Measurement, ProfileResult, TrialOutcome
from autotune.core.trial.precision import RunStop
from autotune.core.trial.sampler_feedback import FEASIBLE
from autotune.core.workload.profiles import WorkloadProfile, get_profile
from autotune.errors import DeploymentError
from autotune.shell.bench.client import BenchmarkRun
from autotune.shell.server.server import TeardownReport
from autotune.study.run.runner import SilentProgress, StudyRunner
from autotune.study.run.study_plan import build_plan
from autotune.study.run.study_setup import prepare_study
from autotune.study.run.trial_function import TrialSetup
from autotune.study.store.records import outcomes, write_outcome
from autotune.study.store.state import mark_references, write_plan
from autotune.study.store.storage import Heartbeat, open_storage

# ---------------------------------------------------------------- paths, model configs, real slots

REPO = Path(__file__).resolve().parent.parent
SPACES = REPO / "search_spaces"

GLM_MOE_MTP_CONFIG = {
    "architectures": ["Glm4MoeForCausalLM"], "n_routed_experts": 4, "num_nextn_predict_layers": 1,
    "max_position_embeddings": 32768, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 512,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
}
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 32768,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


def cpu_slot(tp: int = 2):
    from autotune.core.deployment.slots import make_slots

    cores = sorted(os.sched_getaffinity(0))
    return make_slots("cpu", cores, tp, per_rank=max(1, len(cores) // tp))[0]


# ---------------------------------------------------------------- the real study (slow tests)

# A small space for the tests: -O0/-O2 and the performance mode on every model, expert parallel
# on the MoE model (a real crash on the CPU build), at a length that needs no YaRN, and vLLM's
# sampling seed, which does nothing at temperature 0: the report must find no effect for it.
REAL_STUDY_SPACE = """
name: test
deployment: {tensor_parallel_size: 2, max_model_len: 4096}
parameters:
  - {name: optimization_level, type: categorical, choices: [0, 2], default: 2, flag: --optimization-level}
  - {name: performance_mode, type: categorical, choices: [throughput, interactivity],
     default: throughput, flag: --performance-mode}
  - {name: expert_parallel, type: bool, default: false, flag: --enable-expert-parallel, applies_to: moe}
  - {name: sampling_seed, type: categorical, choices: [0, 1], default: 0, flag: --seed}
"""
REAL_STUDY_REFERENCES = """
baseline: o0
configs:
  - {name: o0, params: {optimization_level: 0}}
  - {name: o0-ep, base: o0, params: {expert_parallel: true}}
"""
REAL_STUDY_SMALL = ["--num-prompts", "4", "--input-len", "64", "--output-len", "16"]
REAL_STUDY_PROFILES = ["--profile", "low-concurrency", "--profile", "high-concurrency"]
POSTGRES_PASSWORD = "pg-test-secret"  # must never show in autotune's output


def autotune(root: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autotune", "--workdir", str(root / "studies"), *args],
        cwd=REPO, capture_output=True, text=True, timeout=1800, **kwargs,
    )


def run_args(root: Path, model: str, study: str, trials: int) -> list[str]:
    """The shared real study: the references' own baseline (o0) measured first, without the
    calibration redeployment and with the sampler right after the references (no exploration
    order), so that its trials are o0, o0-ep (a crash), then sampled ones.
    vLLM's defaults as the baseline are run by tests/study/test_workers.py and the dry run."""
    return ["run", *REAL_STUDY_PROFILES, "--model", model, "--space", str(root / "space.yaml"),
            "--references", str(root / "refs.yaml"), "--seed-references", "--baseline", "o0",
            "--no-calibrate", "--exploration", "sampler", "--study", study, "--trials", str(trials),
            "--seed", "1",
            "--confirm", "0", *REAL_STUDY_SMALL]


def load(root: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{root / 'studies' / 'autotune.db'}")


def vllm_processes(model: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", model], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "vllm" in line and "pgrep" not in line]


# ---------------------------------------------------------------- an HTTP stand-in

@asynccontextmanager
async def stand_in_http(app: web.Application) -> AsyncIterator[str]:
    """An aiohttp stand-in server on 127.0.0.1 (a free port) for the client's tests; yields its
    URL and stops it on leaving."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


# ---------------------------------------------------------------- stand-ins for vLLM

@dataclass
class StandInDeployment:
    """A stand-in for shell.server.server.ServerProcess: 'starts' by raising ``start_error`` or not,
    serves while ``serving``; records that it was torn down."""

    spec: object
    on_phase: object = None
    start_error: Exception | None = None
    torn_down_on_error: bool = True  # False: a deployment that fails to start and leaves itself
    phases_error: Exception | None = None
    serving: bool = True
    url: str = "http://127.0.0.1:1"
    model_name: str = "m"
    api_key: str = "k"
    startup_s: float = 0.0
    teardown: TeardownReport | None = None
    entered: bool = False

    def __enter__(self):
        self.entered = True
        if self.start_error is not None:
            if self.torn_down_on_error:
                self.teardown = TeardownReport((), True, 0.1)
            raise self.start_error
        self.startup_s = 12.5
        return self

    def __exit__(self, *exc) -> None:
        self.teardown = TeardownReport((), True, 0.2)

    def is_serving(self) -> bool:
        return self.serving

    def diagnose(self, symptom: str) -> DeploymentError:
        return DeploymentError(failures.ENGINE_DIED, f"{symptom}; vLLM: worker died",
                               log_tail="Traceback ... EngineDeadError")

    def gpu_used_mib(self) -> int | None:
        return None

    def phases(self) -> None:
        if self.phases_error is not None:
            raise self.phases_error
        return None


@dataclass
class StandInBench:
    """A stand-in for shell.bench.client.run_profile: every request succeeds, or fails as told, or
    the whole benchmark raises ``error``."""

    failed_requests: int = 0
    error: Exception | None = None
    ttft_s: float = 0.01
    calls: list[str] = field(default_factory=list)

    def __call__(self, target, profile, *, seed, source, slo=None, stop=None,
                 until=None) -> BenchmarkRun:  # until: every request is sent (as at the ceiling)
        self.calls.append(profile.name)
        if self.error is not None:
            raise self.error
        results = [RequestResult(prompt_len=8, start_s=0.0, success=i >= self.failed_requests,
                                 output_tokens=4, ttft_s=self.ttft_s, latency_s=self.ttft_s + 0.04,
                                 itl_s=(0.01, 0.01, 0.01), error="HTTP 500: engine dead")
                   for i in range(profile.num_prompts)]
        if stop is not None:  # the client's contract: asked after each completion, then no more
            results = results[:next((k for k in range(1, len(results)) if stop(results[:k])),
                                    len(results))]
        return BenchmarkRun(profile, seed, summarize(results, 1.0), tuple(results))


class Said(SilentProgress):
    def __init__(self) -> None:
        self.said: list[str] = []

    def message(self, text: str) -> None:
        self.said.append(text)


# ---------------------------------------------------------------- a study through the runner

SPACE = """
name: fast
deployment: {tensor_parallel_size: 1, max_model_len: 4096}
parameters:
  - {name: optimization_level, type: categorical, choices: [0, 2], default: 2, flag: --optimization-level}
  - {name: mtp, type: bool, default: false, applies_to: mtp,
     json: {flag: --speculative-config, set: {method: mtp, num_speculative_tokens: 1}}}
  - {name: expert_parallel, type: bool, default: false, flag: --enable-expert-parallel, applies_to: moe}
"""
REFERENCES = """
baseline: base
configs:
  - {name: base, params: {optimization_level: 2}}
  - {name: o0, base: base, params: {optimization_level: 0}}
  - {name: ep, base: base, params: {expert_parallel: true}}
"""


class StandIn:
    """A trial function: MTP helps at low concurrency and hurts at high, -O0 halves everything,
    expert parallel crashes the engine (as on the CPU build). Counts its deployments."""

    def __init__(self, seed: int = 0, sd: float = 0.03) -> None:
        self.rng = np.random.default_rng(seed)
        self.sd = sd
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv, bench, setup, on_phase) -> Measurement:
        self.calls.append(tuple(argv))
        on_phase("benchmarking (stand-in)")
        if "--enable-expert-parallel" in argv:
            return Measurement(failure=failures.ENGINE_DIED, failure_message="worker died with exit code -11",
                               log_tail="segfault", startup_s=1.0)
        # vLLM's defaults (a baseline) set no --optimization-level: -O2, vLLM's default
        slow = 0.5 if "--optimization-level" in argv and \
            argv[argv.index("--optimization-level") + 1] == "0" else 1.0
        mtp = "--speculative-config" in argv
        results = {}
        for p in bench.profiles:
            gain = (1.3 if p.max_concurrency <= 2 else 0.85) if mtp else 1.0
            tput = 100.0 * p.max_concurrency ** 0.5 * slow * gain
            runs = []
            for _ in range(bench.repeats):
                t = tput * math.exp(self.rng.normal(0, self.sd))
                runs.append({"output_throughput": t, "mean_e2el_ms": p.max_concurrency * p.output_len
                             * 1000 / t, "mean_ttft_ms": 50.0, "mean_tpot_ms": 5.0,
                             "p99_ttft_ms": 80.0 / slow})
            # every run sends the profile's requests and says so, as a real one does
            stops = tuple(RunStop(p.num_prompts, "ceiling", p.max_concurrency, p.max_concurrency)
                          for _ in runs)
            results[p.name] = ProfileResult(p.name, tuple(runs), stops)
        return Measurement(results=results, startup_s=1.0, bench_s=0.1, wall_s=1.2,
                           vllm_version="stand-in", hardware="none")


def ids(name: str) -> WorkloadProfile:
    """A built-in profile sending random token ids: the config-only model here has no tokenizer."""
    return dataclasses.replace(get_profile(name), token_ids=True)


def make_plan(tmp_path: Path, *, trials: int, references: bool = True, slos=(), name: str = "s",
              sampler: str = "tpe", space: str = SPACE, refs: str = REFERENCES,
              platform: str | None = None, **settings):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(GLM_MOE_MTP_CONFIG))
    (tmp_path / "space.yaml").write_text(space)
    (tmp_path / "refs.yaml").write_text(refs)
    return build_plan(StudyRequest(
        workdir=tmp_path / "studies",
        profiles=(ids("low-concurrency"), ids("high-concurrency")),
        model=str(model), space_path=str(tmp_path / "space.yaml"),
        references_path=str(tmp_path / "refs.yaml") if references else None, trials=trials,
        repeats=2, seed=1, study_name=name, slos=tuple(slos), sampler=sampler, **settings),
        platform=platform)


ONE_ENGINE_SPACE = """
name: one-engine
deployment: {tensor_parallel_size: 1, max_model_len: 4096}
parameters:
  - {name: optimization_level, type: categorical, choices: [2, 3], default: 2, flag: --optimization-level}
  - {name: mtp, type: bool, default: false, applies_to: mtp,
     json: {flag: --speculative-config, set: {method: mtp, num_speculative_tokens: 1}}}
"""
O2_O3_REFERENCES = ("configs:\n  - {name: o2, params: {optimization_level: 2}}\n"
                    "  - {name: o3, params: {optimization_level: 3}}\n")


def o3_is_o2(argv) -> str:
    """A stand-in for vLLM's resolution (shell.server.validation.engine_identity, tested in
    test_validation.py): -O3 resolves to the -O2 engine, as in vLLM 0.32."""
    return " ".join(argv).replace("--optimization-level 3", "--optimization-level 2")


def o2_o3_plan(tmp_path: Path, *, trials: int, space: str = ONE_ENGINE_SPACE):
    """A plan whose references o2 (-O2) and o3 (-O3) are one engine under ``o3_is_o2``."""
    return make_plan(tmp_path, trials=trials, space=space, refs=O2_O3_REFERENCES)


def run(plan, trial_fn, *, storage: BaseStorage | None = None, heartbeat: Heartbeat | None = None,
        setup: TrialSetup | None = None, **runner) -> optuna.Study:
    """Create (or join) the plan's study in ``storage`` (None: the plan's SQLite file, as
    `autotune run` does) and run one worker on it with ``trial_fn``; ``runner``: the other
    ``StudyRunner`` settings (``poll_s`` 0.1 unless given)."""
    plan.workdir.mkdir(parents=True, exist_ok=True)
    heartbeat = heartbeat or Heartbeat()
    prepare_study(plan, heartbeat, storage)
    return StudyRunner(plan, setup or TrialSetup(model="", workdir=plan.workdir),
                       trial_fn=trial_fn, storage=storage, heartbeat=heartbeat,
                       **{"poll_s": 0.1, **runner}).work()


def run_in_memory(plan, trial_fn, **settings) -> optuna.Study:
    """``run`` on Optuna's in-memory storage: for the runner's logic, where what a storage
    keeps (SQLite, reloading, heartbeats) is not under test; a study run twice needs ``run``
    with one storage passed both times."""
    return run(plan, trial_fn, storage=optuna.storages.InMemoryStorage(), **settings)


def fold_sqlite_logs(folder: Path) -> None:
    """Fold each SQLite file's write-ahead log into the file: a study ``run`` built keeps its
    connection open, whose closing, at any later moment, would change the files mid-copy."""
    for db in folder.rglob("*.db"):
        with contextlib.closing(sqlite3.connect(db)) as conn:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert not busy, f"{db}: still written to; its log could not be folded in"


def copy_built(folder: Path, into: Path) -> None:
    """``folder``, its logs folded in (``fold_sqlite_logs``), copied into ``into`` without the
    SQLite files' -wal and -shm, which a connection of the build may still hold."""
    shutil.copytree(folder, into, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.db-wal", "*.db-shm"))


def copy_searched(built_once, tmp_path: Path):
    """``run(make_plan(tmp_path, trials=6), StandIn())``, run once per process (conftest's
    ``built_once``) and copied into ``tmp_path``; returns the plan and the study, open for
    writing. The stored plan and trials name the first copy's model folder (the same config);
    a confirmation or a reading command takes the plan the test passes, as `autotune confirm`
    rebuilds it (a resumed search would refuse the other model path)."""
    built_once("searched", lambda folder: run(make_plan(folder, trials=6), StandIn()), tmp_path)
    plan = make_plan(tmp_path, trials=6)
    return plan, optuna.load_study(study_name=plan.study_name,
                                   storage=open_storage(plan.storage, Heartbeat()))


TIED_REFS = """
baseline: base
configs:
  - {name: base, params: {optimization_level: 2}}
  - {name: mtp, base: base, params: {mtp: true}}
  - {name: o0, base: base, params: {optimization_level: 0}}
"""


class MtpDoesNothing(StandIn):
    """``StandIn`` where MTP changes nothing: -O2 with and without MTP are tied, -O0 is
    decided (half as fast). Counts its deployments per flag set."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.deployed: list[tuple[str, ...]] = []

    def __call__(self, argv, bench, setup, on_phase):
        self.deployed.append(tuple(argv))
        i = argv.index("--speculative-config") if "--speculative-config" in argv else None
        same = tuple(argv) if i is None else tuple(argv[:i]) + tuple(argv[i + 2:])
        return super().__call__(same, bench, setup, on_phase)


def copy_tied(tmp_path: Path, built_once, smallest_difference: float):
    """The study ``run(make_plan(tmp_path, trials=3, refs=TIED_REFS, smallest_difference=...),
    MtpDoesNothing())``: its three references measured, MTP tied with the base and -O0
    decided. Run once per process and ``smallest_difference`` (conftest's ``built_once``) and
    copied into ``tmp_path``; returns the plan, the study open for writing and the numbers of
    (base, mtp, o0). The stored plan names the first copy's model folder, as in
    ``copy_searched``."""
    def build(folder: Path) -> None:
        run(make_plan(folder, trials=3, refs=TIED_REFS, smallest_difference=smallest_difference),
            MtpDoesNothing())
    built_once(f"tied references at {smallest_difference}", build, tmp_path)
    plan = make_plan(tmp_path, trials=3, refs=TIED_REFS, smallest_difference=smallest_difference)
    study = optuna.load_study(study_name=plan.study_name,
                              storage=open_storage(plan.storage, Heartbeat()))
    base, mtp, o0 = (t.number for t in outcomes(study))
    return plan, study, (base, mtp, o0)


ONE_PARAMETER_SPACE = ("name: t\ndeployment: {tensor_parallel_size: 2}\nparameters:\n"
         "  - {name: max_num_seqs, type: int, low: 4, high: 64, default: 8, flag: --max-num-seqs}\n")


def request_in(tmp_path: Path, **settings) -> StudyRequest:
    """A study request of one profile and one parameter on a config-only dense model."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (tmp_path / "space.yaml").write_text(ONE_PARAMETER_SPACE)
    return StudyRequest(**{
        "workdir": tmp_path, "profiles": (ids("high-concurrency"),),
        "model": str(tmp_path / "model"), "space_path": str(tmp_path / "space.yaml"), "trials": 7,
        "repeats": 2, "seed": 11, "study_name": "p", "storage": "sqlite://",
        "slos": ("high-concurrency:p99_ttft_ms<=500",), "tp": 1, "max_model_len": 4096,
        "objectives": ("high-concurrency:p99_ttft_ms",), **settings})


# ---------------------------------------------------------------- the recorded CPU table (replays)

DATA = REPO / "benchmarks" / "data" / "cpu-table"
RECORDED = parse_csv((DATA / "table.csv").read_text(), "table.csv")
# Expert parallel crashes on the CPU build: configurations the recording did not reach are
# taken to fail as every measured one did (core.analysis.table.fill_unreached), as the
# benchmark does.
TABLE, INFERRED = (fill_unreached(RECORDED, {"expert_parallel": True, "yarn": True}) if RECORDED.count(NOT_REACHED)
                   else (RECORDED, ""))


# ---------------------------------------------------------------- stored studies for the reading commands

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
    write_plan(study, StudyRequest(profiles=tuple(get_profile(p) for p in profiles),
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


def age_heartbeats(db: Path, seconds: int) -> None:
    """Move every heartbeat stored in the SQLite study ``db`` ``seconds`` into the past: a
    worker that died that long ago, without the test sleeping through the grace period. SQLite
    stamps heartbeats to the second, so a sleep had to outlast the grace by a whole second."""
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        changed = conn.execute("UPDATE trial_heartbeats SET heartbeat = "
                               "datetime(heartbeat, ?)", (f"-{seconds} seconds",)).rowcount
    assert changed, f"no heartbeat stored in {db}"


def files(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def one_line(err: str) -> str:
    [line] = err.strip().splitlines()
    assert line.startswith("autotune: error: ")
    return line.removeprefix("autotune: error: ")
