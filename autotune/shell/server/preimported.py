"""A launcher that pays vLLM's imports once per study instead of once per deployment (18 s of an
H100 start, 7 s of a CPU one: docs/startup.md): autotune's side. ``Preimported`` starts one
small process per study (``launcher_process``, loaded by its path: ``LOADER``), which imports
what the entry point's API server imports and forks each deployment's server from it; this side
sends the requests, reads the replies and owns the process's life."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from autotune.shell.server import launcher_process
from autotune.shell.server.launcher_process import MESSAGE_MAX, PREIMPORTS


@dataclass(frozen=True)
class EntryModule:
    """How an entry point runs: this interpreter, ``python -m module`` with these arguments."""

    interpreter: str
    module: str
    args: tuple[str, ...]  # everything after the module: ("serve", MODEL, flags...)


def entry_module_of(argv: Sequence[str]) -> EntryModule | None:
    """The module behind a server argv that this launcher can run: ``PYTHON -m MODULE ...``
    or vLLM's console script (``.../vllm serve ...``, whose shebang names the interpreter).
    None for anything else (a wrapper, a container): that deployment is launched as before."""
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] in PREIMPORTS:
        return EntryModule(argv[0], argv[2], tuple(argv[3:]))
    if argv and Path(argv[0]).name == "vllm":
        try:
            first = Path(argv[0]).read_text(errors="replace").splitlines()[0]
        except (OSError, IndexError):
            return None
        if first.startswith("#!") and "python" in first and len(first[2:].split()) == 1:
            return EntryModule(first[2:].strip(), "vllm.entrypoints.cli.main", tuple(argv[1:]))
    return None


class ForkedServer:
    """A server forked by the launcher, with the part of ``subprocess.Popen`` that
    ``ServerProcess`` uses: ``pid``, ``stdout``, ``poll()``, ``wait()``."""

    def __init__(self, launcher: Preimported, pid: int, stdout) -> None:
        self._launcher, self.pid, self.stdout = launcher, pid, stdout

    def poll(self) -> int | None:
        return self._launcher.exit_code(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        code = self._launcher.wait_exit(self.pid, timeout)
        if code is None:
            import subprocess

            raise subprocess.TimeoutExpired(f"server {self.pid}", timeout or 0)
        return code


class Preimported:
    """The per-study launcher (a context manager). ``spawn`` forks a server from it; if the
    process cannot be used (it failed to start or died), ``spawn`` returns None and the
    caller launches the server as a new process."""

    def __init__(self, interpreter: str, module: str, base_env: Mapping[str, str],
                 *, on_failure: Callable[[str], None] = lambda why: None,
                 on_skipped: Callable[[tuple[str, ...]], None] = lambda names: None) -> None:
        self.interpreter, self.module = interpreter, module
        self._base_env = dict(base_env)
        self._on_failure, self._on_skipped = on_failure, on_skipped
        self._proc = None
        self._sock: socket.socket | None = None
        self._cond = threading.Condition()
        self._replies: dict[int | None, dict] = {}  # by request id
        self._requests = 0
        self._exits: dict[int, int] = {}
        self._closed = False
        self.ready_s: float | None = None  # its imports' seconds, once done
        self.failed = ""  # why it cannot be used
        self.skipped: tuple[str, ...] = ()  # optional modules this vLLM lacks (said by the caller)

    def _fail(self, why: str) -> None:
        """It cannot be used from now on: said once (not when it was closed on purpose)."""
        if not self.failed and not self._closed:
            self.failed = why
            self._on_failure(why)
        self.failed = self.failed or why

    def __enter__(self) -> Preimported:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def serves(self, target: EntryModule) -> bool:
        return not self.failed and target.interpreter == self.interpreter and target.module == self.module

    def start(self) -> None:
        """Start the process (``spawn`` does, at the first deployment); its imports run while
        the caller goes on. It ends when its socket closes: when autotune ends, however it
        ends (not PR_SET_PDEATHSIG, which follows the thread that started it)."""
        import subprocess

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [self.interpreter, "-c", LOADER, launcher_process.__file__, str(theirs.fileno()),
                 self.module],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=self._base_env, pass_fds=(theirs.fileno(),), start_new_session=True,
            )
        except OSError as exc:
            self._fail(f"could not start {self.interpreter}: {exc}")
            ours.close()
            return
        finally:
            theirs.close()
        self._sock = ours
        threading.Thread(target=self._read, name="preimported launcher", daemon=True).start()

    def warm(self, timeout_s: float = 600.0) -> bool:
        """Start it if need be and wait for its imports; whether it can be used."""
        if self._sock is None and not self.failed and not self._closed:
            self.start()
        if self._sock is None:
            return False
        with self._cond:
            self._cond.wait_for(lambda: self.ready_s is not None or self.failed, timeout_s)
        return self.ready_s is not None and not self.failed

    def _read(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(MESSAGE_MAX)
            except OSError:
                data = b""
            with self._cond:
                if not data:
                    self._fail("its process ended")
                    self._cond.notify_all()
                    return
                try:
                    msg = json.loads(data)
                except ValueError:
                    self._fail(f"unreadable answer {data[:80]!r}")
                    self._cond.notify_all()
                    return
                if "exit" in msg:
                    self._exits[msg["exit"]] = msg["code"]
                elif "ready" in msg:
                    self.ready_s = msg["ready"]
                    self.skipped = tuple(msg.get("skipped", ()))
                    if self.skipped:
                        self._on_skipped(self.skipped)
                    if msg.get("error"):
                        self._fail(f"its imports failed: {msg['error']}")
                else:
                    self._replies[msg.get("id")] = msg
                self._cond.notify_all()

    def spawn(self, args: Sequence[str], env: Mapping[str, str], cwd: str,
              timeout_s: float = 600.0) -> ForkedServer | None:
        """Fork a server running the module with ``args`` (``EntryModule.args``), this
        environment and folder; None where the launcher cannot serve (the caller starts a
        process). The first waits for the imports, at most ``timeout_s``."""
        if self._sock is None and not self.failed and not self._closed:
            self.start()
        if self._sock is None or self.failed:
            return None
        read_end, write_end = os.pipe()
        try:
            with self._cond:
                self._requests += 1
                rid = self._requests
                request = json.dumps({"id": rid, "args": list(args), "env": dict(env), "cwd": cwd})
                socket.send_fds(self._sock, [request.encode()], [write_end])
                if not self._cond.wait_for(lambda: rid in self._replies or self.failed, timeout_s):
                    self._fail(f"no answer in {timeout_s:.0f} s")
                reply = self._replies.pop(rid, {"error": self.failed})
        except BaseException as exc:  # an interrupt too: a reply may still come, for nobody
            os.close(read_end)
            self._fail(f"lost: {exc!r}")
            if not isinstance(exc, Exception):
                raise
            return None
        finally:
            os.close(write_end)
        if "pid" not in reply:
            self._fail(reply.get("error") or "no pid")
            os.close(read_end)
            return None
        return ForkedServer(self, reply["pid"], os.fdopen(read_end, "rb", buffering=0))

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
            # The launcher gone: its children died with it (PR_SET_PDEATHSIG).
            if self.failed and not _alive(pid):
                return self._exits.setdefault(pid, -signal.SIGTERM)
            return None

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.exit_code(pid)) is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return None
            with self._cond:
                self._cond.wait(min(0.5, left) if left is not None else 0.5)
        return code

    def close(self) -> None:
        """End the process (its children's sessions with it)."""
        if self._closed:
            return
        self._closed = True
        if self._sock is not None:
            try:  # wakes the reader thread's recv; the process reads the end of its input
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - it must not outlive the study
                self._proc.kill()
                self._proc.wait()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


# Run as ``python -c LOADER FILE FD MODULE``: launcher_process.py loaded by its path, so that nothing is
# added to the interpreter's path (vLLM's interpreter may be another environment's).
LOADER = ("import importlib.util as u, sys; s = u.spec_from_file_location('autotune_launcher', "
          "sys.argv[1]); m = sys.modules[s.name] = u.module_from_spec(s); s.loader.exec_module(m); "
          "m.serve(int(sys.argv[2]), sys.argv[3])")

