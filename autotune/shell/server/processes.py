"""Process utilities (Linux): free ports, the processes of a session, processes marked by an
environment variable, killing them, and dying with the parent. Shared by the deployment, the
reaper of dead workers and the pool of slot workers."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = HOST) -> bool:
    """Nothing listens on ``port`` (closed connections in TIME_WAIT do not count: a new
    server binds with SO_REUSEADDR, as vLLM's does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _live_processes() -> Iterator[Path]:
    """/proc entries of live processes (Linux)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield entry


def session_pids(sid: int) -> list[int]:
    """Live processes whose session id is ``sid`` (Linux /proc)."""
    pids = []
    for entry in _live_processes():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields: state ppid pgrp session ...; zombies are gone for our purposes
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


def marked_processes(variable: str) -> dict[str, list[int]]:
    """Live processes of this user whose environment sets ``variable``, by its value.

    Every trial's server carries ``AUTOTUNE_TRIAL=<study uid>:<trial number>`` and its
    children inherit it, so the servers of a worker that was killed can be found and reaped
    by another worker on the same host (Linux /proc)."""
    prefix = f"{variable}=".encode()
    found: dict[str, list[int]] = {}
    for entry in _live_processes():
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(prefix):
                found.setdefault(item[len(prefix):].decode(errors="replace"), []).append(
                    int(entry.name))
                break
    return found


def processes_titled(sid: int, text: str) -> list[int]:
    """Live processes of session ``sid`` whose command line (or title) contains ``text``."""
    found = []
    for pid in session_pids(sid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in title:
            found.append(pid)
    return found


def lower_priority(pids: Sequence[int], nice: int = 19) -> list[int]:
    """Set every thread of these processes to ``nice``; returns the processes reached."""
    reached = []
    for pid in pids:
        try:
            threads = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for tid in threads:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except (ProcessLookupError, PermissionError):
                continue
        reached.append(pid)
    return reached


def kill_processes(pids: Sequence[int]) -> None:
    """SIGKILL each process and the process group it belongs to (a server's group is its
    session: a marked engine core takes its API server along), never this process's group."""
    for pid in pids:
        try:
            group = os.getpgid(pid)
            if group != os.getpgrp():
                os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        kill(pid)


def die_with_parent() -> None:
    """Child-side: get SIGTERM if autotune dies, so a killed tuner leaves no server behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM (main thread only: Python handles signals there) and deliver
    them afterwards, so an impatient second Ctrl-C cannot abandon a half-killed server."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
