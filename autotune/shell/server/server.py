"""The one module that owns vLLM server processes: launch, readiness, failure, teardown.
``ServerProcess`` is a context manager: a new session on a free 127.0.0.1 port, a random API key
in a private ``--config`` file (never argv, which ``ps`` shows, nor the environment, whose VLLM_*
variables vLLM 0.26 hashes into its compile-cache key), ready once one real completion succeeds;
leaving kills the process group and checks that nothing is left and the port is free. The log,
its stamps and the teardown in full: docs/deployments.md, docs/startup.md#what-each-trial-records."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from autotune.core.deployment.failures import (
    ENGINE_DIED,
    HOST_FAULT,
    STARTUP_TIMEOUT,
    FailureClass,
    classify_startup_exit,
    engine_death_message,
    engine_died,
    startup_failed,
    tail,
    vllm_message,
)
from autotune.core.deployment.slots import Slot
from autotune.core.deployment.startup import LISTENING, LogLine, StartupPhases, startup_phases
from autotune.core.maths.platforms import CPU, GPU
from autotune.errors import ConfigError, DeploymentError
from autotune.shell.server.install import Entrypoint, resolve_entrypoint
from autotune.shell.server.key_config import remove_key_config, write_key_config
from autotune.shell.server.preimported import ForkedServer, Preimported, entry_module_of
from autotune.shell.server.processes import (
    HOST,
    die_with_parent,
    free_port,
    kill,
    lower_priority,
    port_is_free,
    processes_titled,
    session_pids,
    signals_held,
)


@dataclass(frozen=True)
class DeploymentSpec:
    """Everything that decides one vLLM server."""

    model: str
    options: tuple[str, ...] = ()  # vLLM flags after the model, e.g. from flags.to_argv
    slot: Slot | None = None
    entrypoint: Entrypoint | None = None
    startup_timeout_s: float = 600.0
    grace_s: float = 20.0
    log_path: Path | None = None
    served_model_name: str = ""
    extra_env: tuple[tuple[str, str], ...] = ()
    launcher: Preimported | None = None  # forks the server with vLLM imported (None: a new process)


@dataclass(frozen=True)
class TeardownReport:
    """What was left after teardown: no process, a free port, and (GPU slots read through
    NVML) the GPUs' memory back at its pre-launch level."""

    leftover_pids: tuple[int, ...]
    port_free: bool
    seconds: float
    gpu_memory_released: bool | None = None  # None: not a GPU slot, or NVML unavailable
    gpu_used_mib: tuple[tuple[int, int], ...] = ()  # (GPU index, MiB used) after teardown

    @property
    def clean(self) -> bool:
        return not self.leftover_pids and self.port_free and self.gpu_memory_released is not False


@dataclass
class ServerProcess:
    """A running vLLM server (context manager). ``startup_s`` is set once it is ready."""

    spec: DeploymentSpec
    on_phase: Callable[[str], None] = lambda phase: None
    port: int = 0
    api_key: str = field(default="", repr=False)
    startup_s: float = 0.0
    workers_niced: list[int] = field(default_factory=list)  # TP workers set to the lowest priority
    argv: list[str] = field(default_factory=list)
    teardown: TeardownReport | None = None
    preimported: bool = False  # forked by the spec's launcher, its imports inherited
    _proc: subprocess.Popen | ForkedServer | None = field(default=None, repr=False)
    _gpu_baseline: dict[int, int] | None = field(default=None, repr=False)
    _log: LogPipe | None = field(default=None, repr=False)
    _cache_bytes: dict[str, tuple[Path, int]] = field(default_factory=dict, repr=False)
    key_config: Path | None = None  # the private file that gives vLLM the key, until read

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def model_name(self) -> str:
        return self.spec.served_model_name or self.spec.model

    @property
    def log_path(self) -> Path:
        assert self.spec.log_path is not None
        return self.spec.log_path

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def environment(self) -> dict[str, str]:
        """The environment the server starts with: ``base_environment()`` with the slot's
        pinning and the spec's extra variables (the shared kernel caches follow
        ``AUTOTUNE_CACHE_DIR`` where the extra variables set it)."""
        env = dict(os.environ)
        if self.spec.slot is not None:
            env.update(self.spec.slot.env())
        env.update(dict(self.spec.extra_env))
        return base_environment(env)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ServerProcess:
        try:  # a launch that fails half-way (its log cannot be written) is torn down too
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the server process; returns at once."""
        spec = self.spec
        if spec.log_path is None:
            raise ConfigError("DeploymentSpec.log_path is required")
        entry = spec.entrypoint or resolve_entrypoint()
        self.port = free_port()
        self.api_key = "at-" + secrets.token_urlsafe(24)
        options = list(spec.options)
        if spec.served_model_name:
            options += ["--served-model-name", spec.served_model_name]
        options += ["--host", HOST, "--port", str(self.port)]
        self.key_config, options = write_key_config(self.api_key, options)
        self.argv = entry.command(spec.model, options)
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        if spec.slot is not None and spec.slot.kind == GPU:
            from autotune.shell.server.gpu import nvml_available, nvml_used_mib

            if nvml_available():
                self._gpu_baseline = nvml_used_mib(spec.slot.devices)
        env = self.environment()
        self._cache_bytes = {name: (path, folder_bytes(path)) for name, path in cache_folders(env).items()}
        self.on_phase("launching")
        self._t0 = time.monotonic()
        target = entry_module_of(self.argv) if spec.launcher is not None else None
        if target is not None and spec.launcher.serves(target):
            self._proc = spec.launcher.spawn(target.args, env, os.getcwd(), timeout_s=spec.startup_timeout_s)
            self.preimported = self._proc is not None
        if self._proc is None:  # no launcher, or one that cannot serve: a new process
            self._t0 = time.monotonic()  # a wait for a launcher that failed is not this start's
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl, async-signal-safe enough
            )
        assert self._proc.stdout is not None
        self._log = LogPipe(self._proc.stdout, spec.log_path, self._t0, secret=self.api_key)

    def _fail(self, failure: FailureClass, message: str) -> DeploymentError:
        return DeploymentError(failure, message, log_tail=tail(self.log_text()))

    def wait_ready(self, poll_s: float = 1.0) -> float:
        """Block until alive + /health + one completion; returns start-up seconds."""
        assert self._proc is not None and self._log is not None
        deadline = self._t0 + self.spec.startup_timeout_s
        fatal_seen: float | None = None
        self.on_phase("waiting for /health")
        with httpx.Client(timeout=10.0) as http:
            while True:
                code = self._proc.poll()
                if code is not None:
                    self._log.close(timeout_s=5.0)  # its last lines, the traceback, written
                    if (died := self._launcher_death()) is not None:
                        raise died
                    diag = classify_startup_exit(code, self.log_text())
                    raise self._fail(diag.failure, f"exited with {code}: {diag.failure_message}")
                if fatal_seen is None and startup_failed(self.log_text()):
                    fatal_seen = time.monotonic()
                if fatal_seen is not None and time.monotonic() - fatal_seen > 15:
                    # vLLM sometimes hangs after a worker fails to start; do not wait it out.
                    diag = classify_startup_exit(1, self.log_text())
                    raise self._fail(diag.failure, f"start-up failed: {diag.failure_message}")
                if time.monotonic() > deadline:
                    raise self._fail(
                        STARTUP_TIMEOUT,
                        f"not ready after {self.spec.startup_timeout_s:.0f} s "
                        f"(last log line: {vllm_message(self.log_text())})",
                    )
                try:
                    if http.get(f"{self.url}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if self._log.listening.is_set():  # the server said it listens: ask again soon
                    time.sleep(0.05)
                elif self._log.ended:  # its output ended: it is dying (or closed its stdout)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout=poll_s)
                else:
                    self._log.wait_news(poll_s)
            self.on_phase("first completion")
            self._first_completion(http)
        self.startup_s = time.monotonic() - self._t0
        self._log.stamping = False
        self._remove_key_config()  # read: vLLM parses its arguments before it serves
        slot = self.spec.slot
        if slot is not None and slot.kind == CPU and slot.tensor_parallel_size > 1:
            # TP workers wait for each step by spinning on a shared-memory queue; on a CPU slot
            # they spin on the very cores the API server and the client need. At the lowest
            # priority they still get every core the others leave idle: on 2 cores this doubled
            # throughput and cut the spread of identical runs from 60-80% to 6-9%
            # (benchmarks/experiments/cpu_spread.py, docs/noise.md). Not with TP=1: its one
            # worker shares its single core with the engine core that waits on it, and starved
            # at nice 19 it was declared dead (tests/study/test_workers.py).
            self.workers_niced = lower_priority(processes_titled(self.pid, "Worker"))
        return self.startup_s

    def startup_lines(self) -> list[LogLine]:
        """Its output up to ready, each line with its arrival (seconds since launch)."""
        return list(self._log.lines) if self._log is not None else []

    def phases(self) -> StartupPhases | None:
        """Where its start-up time went (None before ready)."""
        if not self.startup_s or self._log is None:
            return None
        added = tuple((name, round((folder_bytes(path) - before) / 2**20, 1))
                      for name, (path, before) in self._cache_bytes.items())
        return dataclasses.replace(startup_phases(self._log.lines, self.startup_s),
                                   cache_added_mib=added, launch="preimported" if self.preimported else "")

    def _first_completion(self, http: httpx.Client) -> None:
        """One real completion: a healthy /health does not prove the engine can serve."""
        self.complete([3, 4, 5, 6], max_tokens=4, http=http)

    def complete(self, prompt: str | list[int], *, max_tokens: int,
                 http: httpx.Client | None = None) -> str:
        """One non-streamed completion at temperature 0; its text. A failure is diagnosed
        from the log (DeploymentError)."""
        body = {"model": self.model_name, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0.0}
        client = http or httpx.Client(timeout=10.0)
        try:
            resp = client.post(
                f"{self.url}/v1/completions", json=body,
                headers={"Authorization": f"Bearer {self.api_key}"}, timeout=120.0,
            )
        except httpx.HTTPError as exc:
            raise self.diagnose(f"a completion failed: {exc!r}") from exc
        finally:
            if http is None:
                client.close()
        if resp.status_code != 200:
            raise self.diagnose(f"a completion got HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json()["choices"][0]["text"]

    def _launcher_death(self) -> DeploymentError | None:
        """A forked server whose launcher died was killed with it: the machine's fault (the
        trial is run again), not its configuration's."""
        launcher = self.spec.launcher
        if self.preimported and launcher is not None and launcher.failed:
            return self._fail(HOST_FAULT, f"the pre-imported launcher ended ({launcher.failed}), "
                                          "and the server forked from it with it")
        return None

    def diagnose(self, symptom: str) -> DeploymentError:
        """Classify a server that stopped serving (after it was ready) from its log."""
        time.sleep(0.5)  # let the dying engine flush its traceback
        log = self.log_text()
        code = self._proc.poll() if self._proc else None
        if code is not None and (died := self._launcher_death()) is not None:
            return died
        if engine_died(log) or code is not None:
            return self._fail(
                ENGINE_DIED, f"{symptom}; vLLM: {engine_death_message(log)}"
            )
        return self._fail(ENGINE_DIED, symptom)

    def is_serving(self) -> bool:
        """Process alive and its log does not report a dead engine."""
        return self._proc is not None and self._proc.poll() is None and not engine_died(
            self.log_text()
        )

    def gpu_used_mib(self) -> int | None:
        """GPU memory this deployment holds now (NVML, over its GPUs, less what they held
        before launch); None off GPUs or without NVML."""
        if self._gpu_baseline is None:
            return None
        from autotune.shell.server.gpu import nvml_used_mib

        now = nvml_used_mib(list(self._gpu_baseline))
        return sum(now[i] - self._gpu_baseline[i] for i in self._gpu_baseline)

    def rss_bytes(self) -> int:
        """Resident memory of every process of the deployment, summed (Linux /proc)."""
        total = 0
        for pid in session_pids(self.pid):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                continue
        return total

    def stop(self) -> TeardownReport:
        """Kill the process group and verify nothing is left; idempotent. A second Ctrl-C or
        a SIGTERM during teardown waits until the server is gone."""
        if self.teardown is not None:
            return self.teardown
        with signals_held():
            return self._stop()

    def _remove_key_config(self) -> None:
        if self.key_config is not None:
            remove_key_config(self.key_config)
            self.key_config = None

    def _stop(self) -> TeardownReport:
        self._remove_key_config()
        if self._proc is None:
            self.teardown = TeardownReport((), True, 0.0)
            return self.teardown
        self.on_phase("tearing down")
        t0 = time.monotonic()
        sid = self._proc.pid
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.spec.grace_s
        while time.monotonic() < deadline and (self._proc.poll() is None or session_pids(sid)):
            time.sleep(0.2)
        if self._proc.poll() is None or session_pids(sid):
            self._signal_group(signal.SIGKILL)
            for pid in session_pids(sid):  # members that left the process group
                kill(pid)
            self._proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (session_pids(sid) or not port_is_free(self.port)):
            time.sleep(0.2)
        if self._log is not None:
            self._log.close()
        gpu_ok, gpu_now = None, {}
        if self._gpu_baseline is not None:
            from autotune.shell.server.gpu import wait_released

            gpu_ok, gpu_now = wait_released(self._gpu_baseline)
        self.teardown = TeardownReport(
            tuple(session_pids(sid)), port_is_free(self.port), time.monotonic() - t0,
            gpu_ok, tuple(sorted(gpu_now.items())),
        )
        return self.teardown

    def _signal_group(self, sig: int) -> None:
        assert self._proc is not None
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass


# vLLM starts its engine core (and, where it is spawned, each worker) as a new process. Its
# default spawns, and the child imports vLLM again; forked, it inherits the API server's imports.
# On one H100 (vLLM 0.26, `moe-25g`, check-deploy) a start was ready in 40 s forked against 55 s
# spawned (issue #41). A variable the user sets wins (setdefault). vLLM still spawns where it
# must (CUDA initialised in the parent, or its platform forces spawn): docs/startup.md.
FORK_ENV = (("VLLM_WORKER_MULTIPROC_METHOD", "fork"),)


def serve_once(spec: DeploymentSpec, prompt: str, *, say: Callable[[str], object],
                progress: Callable[[str], object]) -> bool:
    """`check-deploy`: deploy ``spec`` (its phases to ``progress``), say when it was ready, its
    memory and one completion of ``prompt``, tear it down and say what was left; whether the
    teardown was clean."""
    t0 = time.monotonic()
    dep = ServerProcess(spec, on_phase=lambda ph: progress(f"[{time.monotonic() - t0:6.1f} s] {ph}"))
    with dep:
        text = dep.complete(prompt, max_tokens=16)
        devices = spec.slot.devices_text() if spec.slot else "?"
        say(f"ready in {dep.startup_s:.1f} s on {devices}; memory: {dep.rss_bytes() / 2**30:.2f} "
            f"GiB RSS over {len(session_pids(dep.pid))} processes")
        say(f"completion: {text!r}")
    report = dep.teardown
    assert report is not None
    say(f"torn down in {report.seconds:.1f} s; processes left: {len(report.leftover_pids)}; "
        f"port free: {report.port_free}; log: {spec.log_path}")
    return report.clean


def base_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What every deployment's environment holds beside ``env``: the shared kernel caches,
    ``FORK_ENV`` unless already set, unbuffered output and INFO logging (the start-up phases
    are read from its INFO lines; validation quiets vLLM in-process). Never an API key: vLLM
    0.26 hashes VLLM_API_KEY into its compile-cache key, so a fresh key per deployment missed
    the cache every time (docs/startup.md). A pre-imported launcher imports vLLM in it."""
    env = dict(env)
    env.pop("VLLM_API_KEY", None)  # an inherited key would override nothing and vary the hash
    env.update(kernel_cache_env(env))
    for var, value in FORK_ENV:  # the user's own setting wins
        env.setdefault(var, value)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["VLLM_LOGGING_LEVEL"] = "INFO"
    return env


# What an export sets beside vLLM's own variables (VLLM_*): what pins and sizes the server.
SERVER_VARS = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF")
# VLLM_* variables that are autotune's, or a place, not the server's configuration.
NOT_EXPORTED = ("VLLM_API_KEY", "VLLM_LOGGING_LEVEL", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def exported_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of a server's environment that change the server, as an export must set
    them to run as measured: vLLM's own (the CPU build's VLLM_CPU_KVCACHE_SPACE and
    VLLM_CPU_OMP_THREADS_BIND, the worker start method) and ``SERVER_VARS``; never a key or
    token, autotune's logging level or a cache folder."""
    return {k: env[k] for k in sorted(env)
            if (k.startswith("VLLM_") or k in SERVER_VARS or k.startswith("NCCL_"))
            and k not in NOT_EXPORTED and not any(w in k for w in _SECRET_WORDS)}


def preimported_launcher(entrypoint: Entrypoint | None, *,
                         on_failure: Callable[[str], None] = lambda why: None,
                         on_skipped: Callable[[tuple[str, ...]], None] = lambda names: None,
                         ) -> Preimported | None:
    """A launcher for this entry point's servers (started at its first deployment), or None
    where the entry point is not one it can run (a wrapper script, a container)."""
    target = entry_module_of((entrypoint or resolve_entrypoint()).command("MODEL", []))
    if target is None:
        return None
    return Preimported(target.interpreter, target.module, base_environment(os.environ),
                       on_failure=on_failure, on_skipped=on_skipped)


# Kernel caches that vLLM would otherwise keep per configuration (Triton's under each compile
# hash) or that live apart: one folder for every deployment, AUTOTUNE_CACHE_DIR (default
# ~/.cache/autotune). Set whatever the environment holds: importing torch (autotune's validator
# imports vLLM) writes TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_<user> into this process's
# environment, which every server would inherit. vLLM overrides TORCHINDUCTOR_CACHE_DIR
# with a folder under its compile hash when it compiles (vllm/compilation/decorators.py), so
# inductor's own entries are shared only where vLLM does not compile.
KERNEL_CACHES = {"triton": "TRITON_CACHE_DIR", "inductor": "TORCHINDUCTOR_CACHE_DIR",
                 "flashinfer": "FLASHINFER_WORKSPACE_BASE"}


def _user_cache(env: Mapping[str, str]) -> Path:
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def kernel_cache_env(env: Mapping[str, str]) -> dict[str, str]:
    """The kernel caches' variables, under the shared folder."""
    root = Path(env.get("AUTOTUNE_CACHE_DIR") or _user_cache(env) / "autotune")
    return {var: str(root / name) for name, var in KERNEL_CACHES.items()}


def cache_folders(env: Mapping[str, str]) -> dict[str, Path]:
    """Every cache a deployment with this environment uses: vLLM's (its compile cache, and
    inductor's where vLLM compiles) and the kernel caches."""
    vllm = Path(env.get("VLLM_CACHE_ROOT") or _user_cache(env) / "vllm")
    return {"vllm": vllm, **{name: Path(env[var]) for name, var in KERNEL_CACHES.items() if env.get(var)}}


def folder_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 where it does not exist)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


_LISTENING = re.compile(LISTENING.encode())


class LogPipe:
    """Copies a server's output to its log file as it arrives (a reader thread), ``secret``
    replaced by ``***`` (vLLM 0.26 logs its non-default arguments, the API key among them),
    and, while ``stamping``, keeps each line with its arrival in seconds since ``t0``. A line
    (ended by a newline or a progress bar's carriage return) is written whole: the secret
    cannot straddle two writes. ``wait_news`` wakes when the server says it listens or its
    output ends (it died): the readiness poll sleeps past neither."""


    def __init__(self, source, path: Path, t0: float, *, secret: str = "") -> None:
        self.lines: list[LogLine] = []
        self.stamping = True
        self.listening = threading.Event()
        self.ended = False  # the output ended: every holder of the pipe closed it
        self._news = threading.Event()
        self._source, self._t0, self._secret = source, t0, secret.encode()
        self._file = open(path, "wb")  # noqa: SIM115 - closed by the thread at end of output
        self._thread = threading.Thread(target=self._copy, name=f"log {path}", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        partial = b""
        try:
            while chunk := os.read(self._source.fileno(), 1 << 16):
                now = time.monotonic() - self._t0
                partial += chunk
                end = max(partial.rfind(b"\n"), partial.rfind(b"\r")) + 1
                if end:
                    self._write(partial[:end], now)
                    partial = partial[end:]
            self._write(partial, time.monotonic() - self._t0)
        except (OSError, ValueError):  # the pipe or the file closed under us: output ends
            pass
        finally:
            self._file.close()
            self._source.close()
            self.ended = True
            self._news.set()

    def _write(self, text: bytes, now: float) -> None:
        if self._secret:
            text = text.replace(self._secret, b"***")
        self._file.write(text)
        self._file.flush()
        if _LISTENING.search(text):
            self.listening.set()
            self._news.set()
        if self.stamping:
            self.lines += [LogLine(now, raw.decode(errors="replace"))
                           for raw in re.split(rb"\r\n|\r|\n", text) if raw]

    def wait_news(self, timeout_s: float) -> None:
        """Until the server says it listens or its output ends, at most ``timeout_s``."""
        self._news.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Wait for the output to end (the process group is gone), then the file is closed."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._file.close()
