"""The pre-imported launcher's own program, run in vLLM's interpreter (loaded by its path,
``preimported.LOADER``; that interpreter may be another environment's, so it imports nothing of
autotune): import what the entry point's API server imports, then fork a server per request
from autotune's ``Preimported`` until the socket closes. Why forking is safe, the protocol:
docs/startup.md#the-pre-imported-launcher-kept-cpu-measured-gpu-below."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence

MESSAGE_MAX = 1 << 20  # one request: argv and environment

# What the API server of each known entry point imports before it logs: the entry module and
# the module its ``__main__`` imports (vLLM 0.32 moved the server to launchers/; 0.26 kept it
# in openai/api_server). Absent modules are skipped.
PREIMPORTS = {
    "vllm.entrypoints.openai.api_server": ("vllm.entrypoints.openai.api_server",
                                           "vllm.entrypoints.launchers.api_server.entry"),
    "vllm.entrypoints.cli.main": ("vllm.entrypoints.cli.main", "vllm.entrypoints.cli.serve",
                                  "vllm.entrypoints.openai.api_server",
                                  "vllm.entrypoints.launchers.api_server.entry"),
}


def _send(sock: socket.socket, msg: dict) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        pass


def _die_with_parent() -> None:
    """Get SIGTERM when the launcher dies (PR_SET_PDEATHSIG; this module imports no autotune
    module, so that vLLM's interpreter needs no path to autotune)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def _child(sock: socket.socket, request: dict, out_fd: int, module: str) -> None:
    """In the forked child: become the deployment's server and run vLLM's entry module as
    ``python -m`` runs it. It returns only by raising (SystemExit when the server ends), which
    ends this process as python ends: atexit handlers and finalizers run (vLLM shuts its
    engine down in them), an uncaught exception prints its traceback and exits 1."""
    try:
        os.setsid()
        _die_with_parent()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(devnull)
        os.close(out_fd)
        sock.close()
        try:  # ps and pgrep show the server's command line, as for a new process (vLLM needs
            import setproctitle  # it; set before the environment is replaced, whose block it uses)

            setproctitle.setproctitle(" ".join([sys.executable, "-m", module, *request["args"]]))
        except ImportError:
            pass
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = [module, *request["args"]]  # runpy puts the module's file in argv[0]
    except BaseException:  # noqa: BLE001 - the server's own log says why it never started
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    import runpy
    import warnings

    # The module is already imported: runpy says so once; python -m would not.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="runpy")
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _reap(sock: socket.socket, children: set[int]) -> None:
    """Report each child that ended; an ended child's pid is no longer ours to kill."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def preimport(names: Sequence[str], module: str) -> tuple[str, list[str]]:
    """Import the entry module (it must import) and each optional module on its own: one this
    vLLM lacks, its parent package included (0.26 has no ``vllm.entrypoints.launchers``), is
    skipped, not a failure. Returns the error that makes the launcher unusable ("" if none) and
    the optional modules skipped, which the caller says once."""
    import importlib

    skipped: list[str] = []
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Absent here: the module itself or one of its parents, never something it imports.
            if name != module and exc.name is not None and (name + ".").startswith(exc.name + "."):
                skipped.append(name)
                continue
            return f"{name}: {exc!r}"[:300], skipped
        except Exception as exc:  # noqa: BLE001 - the launcher is then unused, said once
            return f"{name}: {exc!r}"[:300], skipped
    return "", skipped


def serve(fd: int, module: str) -> None:
    """The launcher process: import, then fork a server per request until the socket closes.
    A forked child leaves this function only by raising (``_child``)."""
    sock = socket.socket(fileno=fd)
    t0 = time.monotonic()
    error, skipped = preimport(PREIMPORTS.get(module, (module,)), module)
    _send(sock, {"ready": round(time.monotonic() - t0, 3), "error": error, "skipped": skipped})
    children: set[int] = set()
    sock.settimeout(0.2)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, MESSAGE_MAX, 1)
        except TimeoutError:
            _reap(sock, children)
            continue
        except OSError:
            data = b""
        if not data:  # autotune is gone: so are its servers
            for pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            return
        request = None
        try:
            request = json.loads(data)
            if error or not fds:
                raise OSError(error or "no output pipe")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except (ValueError, OSError) as exc:
            for f in fds:
                os.close(f)
            _send(sock, {"id": request.get("id") if isinstance(request, dict) else None,
                         "error": f"{exc}"[:300]})
            continue
        if pid == 0:
            _child(sock, request, fds[0], module)
        os.close(fds[0])
        children.add(pid)
        _send(sock, {"id": request["id"], "pid": pid})
        _reap(sock, children)
