"""Opening the study storage: SQLite for one machine, PostgreSQL for workers on several.
Heartbeats are on, so that a dead worker's trial (SIGKILL, power, network) is failed after the
grace period by whichever live worker looks next, and re-enqueued by Optuna's retry callback.
SQLite gets a 60 s busy timeout and the write-ahead log (readers such as the dashboard never
block a worker), and is refused for several machines: its locks fail on network filesystems."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import optuna
from optuna.exceptions import StorageInternalError
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from autotune.errors import ConfigError, StudyError
from autotune.study.store.optuna_internals import study_id

STORAGE_ENV = "AUTOTUNE_STORAGE"  # keeps a password out of argv (ps) and shell history
SQLITE_BUSY_TIMEOUT_S = 60

# Heartbeats with ask/tell are what we want; Optuna warns because it expects optimize().
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


@dataclass(frozen=True)
class Heartbeat:
    """How a dead worker is noticed: its RUNNING trial misses heartbeats for ``grace_s``."""

    interval_s: int = 30
    grace_s: int = 120
    max_retry: int = 2  # a trial whose workers keep dying is given up after this many retries

    def __post_init__(self) -> None:
        if self.interval_s < 1 or self.grace_s <= self.interval_s or self.max_retry < 0:
            raise ConfigError(
                f"--heartbeat-interval {self.interval_s} / --grace-period {self.grace_s} / "
                f"--max-retry {self.max_retry}: need interval >= 1 s, grace period > interval, "
                "retries >= 0"
            )


_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)[^&#]*")


def redact(url: str) -> str:
    """The URL as the user typed it, its password (if any) replaced by ***, for messages and
    logs (never re-rendered: the driver, host and escapes stay as written). The user part ends
    at the netloc's last @, so a password with an unescaped @ is hidden whole; a ``password=``
    query parameter is hidden too."""
    scheme, sep, rest = url.partition("://")
    if sep:
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        netloc, tail = rest[:end], rest[end:]
        at = netloc.rfind("@")
        if at > 0 and ":" in netloc[:at]:
            netloc = netloc[:netloc.index(":")] + ":***" + netloc[at:]
        url = f"{scheme}://{netloc}{tail}"
    return _QUERY_PASSWORD.sub(r"\g<key>***", url)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def storage_url(flag_value: str | None, default: str) -> str:
    """``--storage``, else $AUTOTUNE_STORAGE, else ``default``, as the user wrote it (messages
    quote it so; ``engine_url`` is what is opened)."""
    return flag_value or os.environ.get(STORAGE_ENV) or default


def engine_url(url: str) -> str:
    """The URL SQLAlchemy opens: a bare ``postgresql://`` gets the psycopg (3) driver that
    autotune installs, whatever SQLAlchemy's default is."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg://" + url[len(bare):]
    return url


def check_url(url: str, *, created_folder: Path | None = None) -> str:
    """The URL's dialect, or a one-line error naming --storage: an unsupported database, or an
    SQLite file in a folder that does not exist (``created_folder`` is the one `run` makes)."""
    try:
        dialect = make_url(engine_url(url)).get_backend_name()
    except ArgumentError:
        raise ConfigError(f"--storage {redact(url)!r}: not a database URL; expected "
                          "sqlite:///path/to/file.db or postgresql://user@host/db") from None
    if dialect not in ("sqlite", "postgresql"):
        raise ConfigError(f"--storage {redact(url)}: {dialect!r} is not supported; use "
                          "sqlite:///path/to/file.db (one machine) or postgresql://user@host/db")
    path = sqlite_path(url)
    if path is not None and not path.parent.is_dir() and path.parent != created_folder:
        raise ConfigError(f"--storage {redact(url)}: folder {path.parent}/ does not exist; create it "
                          "or give a path in an existing folder")
    return dialect


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL (None for other databases and in-memory SQLite)."""
    if not is_sqlite(url):
        return None
    database = make_url(url).database
    return Path(database) if database and database != ":memory:" else None


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """The one place where the storage's own exceptions (SQLAlchemy's, Optuna's) become a
    StudyError: ``what`` failed, with the database's first line of explanation."""
    try:
        yield
    except (SQLAlchemyError, StorageInternalError) as exc:
        raise StudyError(f"{what}: {error_reason(exc)}") from None


def open_storage(url: str, heartbeat: Heartbeat) -> RDBStorage:
    """An RDB storage with heartbeats and retries, for workers; a one-line error naming
    --storage. Creates an SQLite file that does not exist yet."""
    dialect = check_url(url)
    engine_kwargs: dict = {}
    if dialect == "sqlite":
        _enable_wal(url)
        engine_kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    else:
        engine_kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(
                engine_url(url), engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat.interval_s, grace_period=heartbeat.grace_s,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(
                    max_retry=heartbeat.max_retry),
            )
    except (SQLAlchemyError, ImportError) as exc:
        raise ConfigError(f"--storage {redact(url)}: cannot open it: {error_reason(exc)}") from None


def open_existing(url: str, *, writable: bool = False) -> RDBStorage:
    """A storage that must exist already, opened read-only for commands that only read: an
    SQLite file that is not there, is empty or is not an SQLite database is a one-line error,
    and nothing is ever created or written (SQLite opens the file in read-only mode; Optuna's
    schema must be there already). ``writable``: for the commands that add to an existing
    study (`confirm`, `worker`, `run`'s confirmation), the same checks, then an ordinary
    connection."""
    path = sqlite_path(url)
    had_log = path is not None and Path(f"{path}-wal").exists()
    if writable:
        if path is not None:
            _check_sqlite_file(url, path)
        return open_storage(url, Heartbeat())
    if path is None:
        check_url(url)
        opened, kwargs = engine_url(url), {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    else:
        _check_sqlite_file(url, path)
        opened = f"sqlite:///file:{quote(str(path))}?mode=ro&uri=true"
        kwargs = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna's notes on the read-only connection
            storage = RDBStorage(opened, engine_kwargs=kwargs, skip_table_creation=True)
    except (SQLAlchemyError, StorageInternalError, ImportError, RuntimeError) as exc:
        raise ConfigError(f"--storage {redact(url)}: cannot open it: {error_reason(exc)}") from None
    if path is not None:
        _READERS.append((storage, path, had_log))
    return storage


# Read-only SQLite connections opened by this process: (storage, file, whether its write-ahead
# log existed before). A read-only connection to a WAL database leaves SQLite's -wal and -shm
# files behind (it may not delete them); ``close_readers`` lets SQLite tidy them as it does.
_READERS: list[tuple[RDBStorage, Path, bool]] = []


def close_readers() -> None:
    """Close every read-only storage this process opened; where its SQLite file had no
    write-ahead log before, one ordinary connection opened and closed after ours lets SQLite
    remove the -wal and -shm files the read-only ones left (SQLite removes them only when no
    other process has the file open, and writes nothing to it: the log is empty)."""
    while _READERS:
        storage, path, had_log = _READERS.pop()
        storage.engine.dispose()
        if not had_log and Path(f"{path}-wal").exists():
            try:
                conn = sqlite3.connect(path, timeout=1)
                conn.execute("PRAGMA schema_version").fetchall()  # SQLite opens files lazily
                conn.close()
            except sqlite3.Error:
                pass  # left as SQLite leaves them: harmless, reused by the next connection


_SQLITE_HEADER = b"SQLite format 3\x00"


def _check_sqlite_file(url: str, path: Path) -> None:
    """A one-line error unless ``path`` is an SQLite database file (read, never written)."""
    where = f"--storage {redact(url)}"
    if not path.is_file():
        raise ConfigError(f"{where}: no such file; studies are created by `autotune run` "
                          "(or give --storage / --workdir where they are)")
    with path.open("rb") as f:
        header = f.read(len(_SQLITE_HEADER))
    if not header:
        raise ConfigError(f"{where}: the file is empty, not a study storage; studies are "
                          "created by `autotune run` (left as it is)")
    if header != _SQLITE_HEADER:
        raise ConfigError(f"{where}: {path} is not an SQLite database; give the .db file that "
                          "`autotune run` wrote (default <workdir>/autotune.db)")


def open_to_annotate(url: str) -> RDBStorage:
    """An existing storage opened for the dashboard, whose note editing writes to it: the
    checks of ``open_existing`` (an SQLite file that is not there, empty or not SQLite is a
    one-line error), then an ordinary connection that never creates a table, so a database
    without Optuna's schema stays as it is."""
    path = sqlite_path(url)
    if path is None:
        check_url(url)
        opened, kwargs = engine_url(url), {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
    else:
        _check_sqlite_file(url, path)
        opened, kwargs = url, {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            storage = RDBStorage(opened, engine_kwargs=kwargs, skip_table_creation=True)
    except (SQLAlchemyError, StorageInternalError, ImportError, RuntimeError) as exc:
        raise ConfigError(f"--storage {redact(url)}: cannot open it: {error_reason(exc)}") from None
    with storage_errors(f"--storage {redact(url)}: cannot read it"):
        storage.get_all_studies()  # a database without Optuna's tables fails here, untouched
    return storage


def dashboard_page(storage: RDBStorage, url: str, study: str | None) -> str:
    """The dashboard's page to open: ``study``'s, or the one study's where the storage holds
    one, else the list of studies; a one-line error where ``study`` is not in the storage."""
    names = [s.study_name for s in storage.get_all_studies()]
    if study is not None and study not in names:
        raise ConfigError(f"--study {study!r}: no such study in {redact(url)}; "
                          f"studies there: {', '.join(sorted(names)) or 'none'}")
    shown = study or (names[0] if len(names) == 1 else None)
    if shown is None:
        return "/dashboard"
    return f"/dashboard/studies/{study_id(optuna.load_study(study_name=shown, storage=storage))}"


def study_names(url: str) -> list[str]:
    """The names of the studies in an existing storage, sorted, read without writing (a
    storage that is not there is a one-line error, never created)."""
    storage = open_existing(url)
    with storage_errors(f"--storage {redact(url)}: cannot read it"):
        return sorted(s.study_name for s in storage.get_all_studies())


def only_study(url: str) -> str:
    """The one study of a storage, read by a command given no --study; a one-line error where
    the storage holds none or several (naming them), or is not there (nothing created)."""
    names = study_names(url)
    if len(names) == 1:
        return names[0]
    if not names:
        raise ConfigError(f"--study: no study in {redact(url)}; studies are created by "
                          "`autotune run`")
    raise ConfigError(f"--study: {redact(url)} holds {len(names)} studies, name one: "
                      f"{', '.join(names)}")


def load_existing(study_name: str, url: str, *, writable: bool = False) -> optuna.Study:
    """An existing study (read-only unless ``writable``); a one-line error listing the studies
    there otherwise."""
    storage = open_existing(url, writable=writable)
    with storage_errors(f"--storage {redact(url)}: cannot read it"):
        names = [s.study_name for s in storage.get_all_studies()]
    if study_name not in names:
        raise ConfigError(f"--study {study_name!r}: no such study in {redact(url)}; "
                          f"studies there: {', '.join(names) or 'none'}")
    return optuna.load_study(study_name=study_name, storage=storage)


def error_reason(exc: BaseException) -> str:
    """The first line of the database's own message behind a storage exception (Optuna and
    SQLAlchemy wrap it)."""
    cause = exc.__cause__ or exc
    return str(getattr(cause, "orig", cause)).strip().splitlines()[0]


def _enable_wal(url: str) -> None:
    """Switch the SQLite file to the write-ahead log (a setting stored in the file)."""
    path = sqlite_path(url)
    if path is None:
        return
    try:
        with sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        raise ConfigError(f"--storage {redact(url)}: cannot open the SQLite file: {exc}") from None


def hostname() -> str:
    return socket.gethostname()


def refuse_shared_sqlite(url: str, running_hosts: set[str]) -> None:
    """SQLite cannot be shared between machines: refuse to join a study whose running
    trials belong to workers on another host."""
    others = sorted(running_hosts - {hostname()})
    if is_sqlite(url) and others:
        raise ConfigError(
            f"--storage {redact(url)}: trials of this study are running on {', '.join(others)}; SQLite "
            "cannot be shared between machines (its locks fail over network filesystems): use "
            "--storage postgresql://user@host/db for workers on several nodes"
        )
