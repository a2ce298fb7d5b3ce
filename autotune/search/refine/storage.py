"""Where refinement studies live, and opening that storage so that many processes can share it.

``TuneOptions.storage`` says where: None for the user's cache (an SQLite file,
``$XDG_CACHE_HOME/autotune/studies.db``, ``~/.cache`` when the variable is unset or not an
absolute path, as the XDG spec says), ``"memory"`` for nothing kept, or an SQLAlchemy URL:
``sqlite:///PATH`` or ``postgresql://USER@HOST/DB`` (with ``+psycopg2``, ``+psycopg`` or
``+pg8000``). ``prepare_storage`` checks the choice before any solving and opens it once per
process; a bad URL, a missing driver, a damaged file or one of another application is a
``StorageError`` naming the file and the way out, and nothing is deleted. A cache folder that
cannot be written falls back to memory with a ``StorageWarning``.

Any number of processes may share one storage:

* Optuna creates its tables on first use, which is not safe to race: the first open of an
  SQLite file happens under an exclusive ``flock`` of ``PATH.lock`` beside it, of a PostgreSQL
  database under an advisory lock, and an open that still loses a race is retried.
* SQLite runs in WAL mode (readers never wait for the writer, commits need no fsync of their
  own) with a busy timeout, and every transaction is ``BEGIN IMMEDIATE``: SQLite has no
  ``SELECT ... FOR UPDATE``, so Optuna's read-then-write steps (taking a queued trial,
  finishing one) would otherwise let two processes take the same trial.
* ``create_or_load_study`` settles which process creates a study.
* A trial records a heartbeat every ``HEARTBEAT_INTERVAL_S``; a RUNNING trial whose heartbeat
  is older than ``GRACE_PERIOD_S`` belongs to a dead process: the next process to look fails
  it and queues it again (once).
"""

from __future__ import annotations

import copy
import datetime
import functools
import importlib.util
import inspect
import os
import random
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
import sqlalchemy
import sqlalchemy.exc
from optuna.storages._rdb import models as rdb_models  # the heartbeat table (no public API)

from autotune.files import file_lock
from autotune.ir.options import OptionsError

#: The value of ``TuneOptions.storage`` that keeps studies in memory only.
MEMORY = "memory"
#: Seconds between a running trial's heartbeats, and the silence after which it counts as dead.
HEARTBEAT_INTERVAL_S = 1
GRACE_PERIOD_S = 5
#: Seconds an SQLite connection waits for another process's write before giving up.
BUSY_TIMEOUT_S = 60
#: Milliseconds to wait for other connections to let go before switching a file to WAL.
WAL_SWITCH_TIMEOUT_MS = 2000
#: PostgreSQL drivers: SQLAlchemy's name -> (module, what to pip install).
POSTGRES_DRIVERS = {
    "psycopg2": ("psycopg2", "psycopg2-binary"),
    "psycopg": ("psycopg", "'psycopg[binary]'"),
    "pg8000": ("pg8000", "pg8000"),
}
#: Tables every Optuna RDB storage has: a database without them was made by something else.
OPTUNA_TABLES = frozenset({"studies", "trials", "version_info"})
#: Key of the PostgreSQL advisory lock held while Optuna creates its tables.
_PG_LOCK_KEY = 0x6175746F74756E65  # "autotune"
#: Attempts at opening a storage whose creation another process raced (without our locks).
_OPEN_ATTEMPTS = 5
_WAYS_OUT = "choose another storage ('memory', or sqlite:///OTHER.db)"


class StorageError(OptionsError):
    """The storage cannot be used: a bad URL, a missing driver, a damaged or foreign file, a
    server that does not answer. One line naming the file or URL and the way out."""

    def __init__(self, problem: str) -> None:
        super().__init__("storage", problem)


class StorageWarning(UserWarning):
    """The default cache cannot be written: this run keeps its studies in memory."""


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/autotune``; ``~/.cache/autotune`` when the variable is unset, empty or
    relative (the XDG spec says to ignore relative paths)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autotune"


def storage_url(storage: str | None) -> str | None:
    """The storage URL ``storage`` stands for, None for memory; checked (``check_storage``)
    but not opened. None is the cache file (its folder is not created here)."""
    if storage is None:
        return f"sqlite:///{cache_dir() / 'studies.db'}"
    return check_storage(storage)


def check_storage(storage: str) -> str | None:
    """``storage`` checked without touching it: None for "memory", else the URL to open: one
    of a backend autotune supports whose driver is installed and, for SQLite, whose folder
    exists (``postgresql://`` gets the driver that is installed). Cheap: call it before any
    solving. Raises ``StorageError``."""
    if storage == MEMORY:
        return None
    try:
        url = sqlalchemy.engine.make_url(storage)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        raise StorageError(
            f"{storage!r} is not a storage URL (sqlite:///PATH, postgresql://USER@HOST/DB, "
            f"or '{MEMORY}')"
        ) from None
    backend, _, driver = url.drivername.partition("+")
    shown = _shown(url)
    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise StorageError(
                f"{shown}: SQLite driver {driver!r} is not supported (use sqlite:///)"
            )
        if url.query:
            raise StorageError(f"{shown}: query parameters are not supported")
        if url.database in (None, "", ":memory:"):
            return None  # SQLite in memory is what "memory" does
        folder = Path(url.database).parent
        if not folder.is_dir():
            raise StorageError(f"{shown}: folder {str(folder)!r} does not exist")
        return storage
    if backend == "postgresql":
        if driver == "":
            # SQLAlchemy's default driver (psycopg2; psycopg from SQLAlchemy 2.1 on), else
            # whichever supported driver is installed
            default = url.get_driver_name()
            for name in [default, *POSTGRES_DRIVERS]:
                if name in POSTGRES_DRIVERS and _installed(POSTGRES_DRIVERS[name][0]):
                    chosen = url.set(drivername=f"postgresql+{name}")
                    return chosen.render_as_string(hide_password=False)
            raise StorageError(f"{shown}: PostgreSQL needs a driver: pip install psycopg2-binary")
        if driver not in POSTGRES_DRIVERS:
            raise StorageError(
                f"{shown}: PostgreSQL driver {driver!r} is not supported "
                f"(use postgresql+psycopg2://, postgresql+psycopg:// or postgresql+pg8000://)"
            )
        module, package = POSTGRES_DRIVERS[driver]
        if not _installed(module):
            raise StorageError(
                f"{shown}: PostgreSQL needs the {module} driver: pip install {package}"
            )
        return storage
    raise StorageError(
        f"{shown}: unsupported storage {backend!r} (sqlite:///PATH, postgresql://USER@HOST/DB, "
        f"or '{MEMORY}')"
    )


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def prepare_storage(storage: str | None) -> str | None:
    """The URL refinement will use for ``storage`` (None: memory), opened and checked once per
    process, so that every problem shows before any solving.

    None is the cache file; when its folder cannot be created or written, or the file cannot
    be written, a ``StorageWarning`` says so and the studies stay in memory. Anything else
    wrong is a ``StorageError``: a bad or unsupported URL, a driver not installed, a file
    that is damaged or belongs to another application (never deleted), a server that does
    not answer.
    """
    if storage is None:
        url = _writable_cache()
    else:
        url = check_storage(storage)
    if url is not None:
        # opened (and checked) now; its connections closed again, so that processes forked
        # before refinement inherit none
        open_storage(url).engine.dispose()
    return url


def _writable_cache() -> str | None:
    folder = cache_dir()
    path = folder / "studies.db"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        problem = None
        if not os.access(folder, os.W_OK | os.X_OK):
            problem = f"cannot write the cache folder {folder}"
        elif path.exists() and not os.access(path, os.W_OK):
            problem = f"cannot write the cache file {path}"
    except OSError as exc:
        problem = f"cannot create the cache folder {folder} ({exc.strerror or exc})"
    if problem is not None:
        warnings.warn(
            StorageWarning(
                f"{problem}: refinement studies are kept in memory this run (not resumable, "
                f"not cached); choose a storage with the 'storage' option (--storage)"
            ),
            stacklevel=3,
        )
        return None
    return f"sqlite:///{path}"


#: Storages this process has opened, by (process id, URL): a forked child opens its own.
_OPENED: dict[tuple[int, str], optuna.storages.RDBStorage] = {}
_OPENING = threading.Lock()


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """The Optuna storage at ``url`` (checked with ``check_storage``), opened once per
    process: tables created if new (safely against other processes doing the same), heartbeats
    on, SQLite in WAL mode with immediate transactions. Raises ``StorageError``."""
    with _OPENING:
        key = (os.getpid(), url)
        if key not in _OPENED:
            _OPENED[key] = _open(url)
        return _OPENED[key]


def _open(url: str) -> optuna.storages.RDBStorage:
    parsed = sqlalchemy.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(str(parsed.database))
        _check_sqlite_file(path)
        with file_lock(path.with_name(path.name + ".lock")):
            try:
                _wal(path)
                storage = _rdb_storage(url, {"creator": functools.partial(_connect, str(path))})
            except (sqlite3.Error, sqlalchemy.exc.SQLAlchemyError, RuntimeError) as exc:
                raise StorageError(
                    f"{path}: cannot open it ({_reason(exc)}); {_WAYS_OUT}"
                ) from None
        sqlalchemy.event.listen(storage.engine, "begin", _begin_immediate)
        return storage
    try:
        with _advisory_lock(url):
            return _rdb_storage(url, {})
    except (sqlalchemy.exc.SQLAlchemyError, RuntimeError) as exc:
        raise StorageError(f"{_shown(parsed)}: cannot open it ({_reason(exc)})") from None


def _check_sqlite_file(path: Path) -> None:
    """A file that exists must be an SQLite database with Optuna's tables (or none yet; or
    some: another process may be creating them right now, or a creation was killed, and
    Optuna completes them) and pass SQLite's quick check. Read-only, and before the lock file
    is made: nothing is changed, added or deleted."""
    if not path.exists():
        return
    if not path.is_file():
        raise StorageError(f"{path} is not a file; {_WAYS_OUT}")
    if path.stat().st_size == 0:
        return
    try:
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master")}
            check = con.execute("PRAGMA quick_check(1)").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise StorageError(
            f"{path} is damaged or not an SQLite database ({exc}); nothing was deleted: "
            f"move it away, or {_WAYS_OUT}"
        ) from None
    if check != "ok":
        raise StorageError(
            f"{path} is a damaged SQLite database ({check}); nothing was deleted: move it "
            f"away, or {_WAYS_OUT}"
        )
    if tables and not tables & OPTUNA_TABLES:
        shown = ", ".join(sorted(tables)[:4]) + (", ..." if len(tables) > 4 else "")
        raise StorageError(
            f"{path} is an SQLite database of another application (tables {shown}), not "
            f"autotune's studies; it was left alone: {_WAYS_OUT}"
        )


def _connect(path: str) -> sqlite3.Connection:
    """An SQLite connection as every storage connection is made: wait for other writers up
    to the busy timeout, no implicit transactions (``_begin_immediate`` starts them), commits
    without an fsync of their own (WAL: a crash loses at most the last commits, never the
    database)."""
    con = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    con.execute("PRAGMA synchronous=NORMAL")
    return con


def _wal(path: Path) -> None:
    """Switch the database to WAL mode (a property of the file: done once; creates a new
    file). Best effort: the switch needs the file to itself, and while others keep it busy
    it stays in its rollback journal, slower but as safe."""
    con = _connect(str(path))
    try:
        if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            con.execute(f"PRAGMA busy_timeout = {WAL_SWITCH_TIMEOUT_MS}")
            con.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError:
        pass  # busy
    finally:
        con.close()


def _begin_immediate(conn: sqlalchemy.engine.Connection) -> None:
    """Every transaction takes SQLite's write lock when it begins: Optuna's read-then-write
    steps then cannot interleave with another process's (no FOR UPDATE in SQLite)."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def _advisory_lock(url: str) -> Iterator[None]:
    """A PostgreSQL session advisory lock held for the block (Optuna's table creation)."""
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _PG_LOCK_KEY})
            try:
                yield
            finally:
                conn.execute(
                    sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": _PG_LOCK_KEY}
                )
    finally:
        engine.dispose()


#: Optuna 4.9 renamed ``failed_trial_callback`` (and its class); both spellings are accepted.
_STALE_CALLBACK = (
    "heartbeat_stale_trial_callback"
    if "heartbeat_stale_trial_callback"
    in inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    else "failed_trial_callback"
)


def retry_callback() -> Any:
    """Optuna's callback that queues a failed trial again, at most once."""
    storages = optuna.storages
    cls = (
        getattr(storages, "RetryHeartbeatStaleTrialCallback", None)
        or storages.RetryFailedTrialCallback
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return cls(max_retry=1)


def _rdb_storage(url: str, engine: dict[str, Any]) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage with heartbeats; an open that lost a table-creation race to a
    process without our locks is retried."""
    for attempt in range(1, _OPEN_ATTEMPTS + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine,
                    heartbeat_interval=HEARTBEAT_INTERVAL_S,
                    grace_period=GRACE_PERIOD_S,
                    **{_STALE_CALLBACK: retry_callback()},
                )
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError):
            if attempt == _OPEN_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.05, 0.3))
    raise AssertionError("unreachable")


def create_or_load_study(
    name: str, storage: optuna.storages.BaseStorage | None, sampler: optuna.samplers.BaseSampler
) -> tuple[optuna.Study, bool]:
    """The study ``name`` (minimising), and whether this call created it. Of several processes
    racing, exactly one creates it (the name is unique in the storage); the others load it."""
    for attempt in range(1, _OPEN_ATTEMPTS + 1):
        try:
            study = optuna.create_study(
                study_name=name, storage=storage, direction="minimize", sampler=sampler
            )
            return study, True
        except optuna.exceptions.DuplicatedStudyError:
            if storage is None:
                raise  # a new in-memory storage holds no study
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler), False
        except KeyError:  # deleted in between: create it again
            if attempt == _OPEN_ATTEMPTS:
                raise
            time.sleep(random.uniform(0.05, 0.3))
    raise AssertionError("unreachable")


@contextmanager
def heartbeat(storage: optuna.storages.BaseStorage | None, trial_id: int) -> Iterator[None]:
    """Record the trial's heartbeat every ``HEARTBEAT_INTERVAL_S`` (first at once) while the
    block runs, from a thread: a process that dies leaves a trial whose heartbeat goes stale.
    Nothing for storages without heartbeats (memory)."""
    if not isinstance(storage, optuna.storages.RDBStorage):
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            try:
                storage.record_heartbeat(trial_id)
            except Exception:  # a heartbeat lost is only a heartbeat late
                pass
            if stop.wait(HEARTBEAT_INTERVAL_S):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail the study's RUNNING trials whose heartbeat went stale (their process died) and
    queue each again once (``retry_callback``).

    Also the trials of a process killed between asking for a trial and its first heartbeat:
    Optuna never sees those as stale (they have no heartbeat at all), so a RUNNING trial
    without one that started more than ``2 * GRACE_PERIOD_S`` ago is failed the same way (a
    live process beats right after asking)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    storage = study._storage
    backend = getattr(storage, "_backend", storage)  # Optuna wraps an RDBStorage in a cache
    if not isinstance(backend, optuna.storages.RDBStorage) or backend.heartbeat_interval is None:
        return
    now = datetime.datetime.now()
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    old = [
        t
        for t in running
        if t.datetime_start is not None
        and (now - t.datetime_start).total_seconds() > 2 * GRACE_PERIOD_S
    ]
    if not old:
        return
    beating = _trials_with_heartbeats(backend, [t._trial_id for t in old])
    if beating is None:
        return  # the storage's layout is not the one this reads: Optuna's own check only
    callback = backend.get_heartbeat_stale_trial_callback()
    for trial in old:
        if trial._trial_id in beating:
            continue
        try:
            failed = storage.set_trial_state_values(
                trial._trial_id, state=optuna.trial.TrialState.FAIL
            )
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process failed or finished it
        if failed and callback is not None:
            callback(study, copy.deepcopy(storage.get_trial(trial._trial_id)))


def _trials_with_heartbeats(
    storage: optuna.storages.RDBStorage, trial_ids: list[int]
) -> set[int] | None:
    """Which of ``trial_ids`` have a heartbeat record (None if it cannot be read)."""
    try:
        heartbeats = rdb_models.TrialHeartbeatModel
        session = storage.scoped_session()
        try:
            rows = (
                session.query(heartbeats.trial_id).filter(heartbeats.trial_id.in_(trial_ids)).all()
            )
        finally:
            storage.scoped_session.remove()
    except (AttributeError, sqlalchemy.exc.SQLAlchemyError):
        return None
    return {row[0] for row in rows}


def _shown(url: sqlalchemy.engine.URL) -> str:
    """The URL with its password hidden."""
    return url.render_as_string(hide_password=True)


def _reason(exc: BaseException) -> str:
    """The first line of a database error, without SQLAlchemy's background link."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__
