"""Opening a database: which engine, its settings, and the one-bridge lock."""

import os
import stat
from pathlib import Path
from typing import Any

import peewee as pw

from .errors import StoreError, StoreUnavailable
from .locks import FileLock, PgAdvisoryLock
from .resilience import application_name

DB_FILE = "sidekicks.db"
LOCK_FILE = "sidekicks.lock"

# WAL: readers never block the writer and a commit is one append.
# synchronous=NORMAL is durable across process crashes (WAL), which is what a
# bridge needs; foreign keys are off by default in SQLite.
SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": 1,
    "busy_timeout": 5000,
    "cache_size": -8000,  # KiB: memory stays small whatever the history size
    "temp_store": "memory",
}

Lock = FileLock | PgAdvisoryLock


def connect(database: str, folder: str | Path | None) -> tuple[pw.Database, Lock | None]:
    """Connect and lock; the caller owns both. Raises StoreLocked if held."""
    # One connection shared by all threads (callers serialise): a PostgreSQL
    # advisory lock belongs to the connection, and ':memory:' is per connection.
    common: dict[str, Any] = {"thread_safe": False, "autoconnect": False}
    if database == ":memory:":
        db = pw.SqliteDatabase(":memory:", pragmas=SQLITE_PRAGMAS, check_same_thread=False, **common)
        db.connect()
        return db, None
    if database == "sqlite":
        if folder is None:
            raise ValueError("a SQLite store needs a folder")
        folder = Path(folder)
        _private(folder)
        lock = FileLock(folder / LOCK_FILE)
        lock.acquire()  # before touching the database: it may be in use
        try:
            _private_files(folder / DB_FILE)
            db = pw.SqliteDatabase(str(folder / DB_FILE), pragmas=SQLITE_PRAGMAS, check_same_thread=False, **common)
            db.connect()
        except BaseException as exc:
            lock.release()
            if isinstance(exc, pw.PeeweeException):
                raise StoreError(f"cannot open {folder / DB_FILE}: {exc}") from exc
            raise
        return db, lock
    if database.startswith(("postgresql://", "postgres://")):
        # peewee hands a postgresql:// name to libpq as a URL.
        url = "postgresql://" + database.split("://", 1)[1]
        # a name of its own (to tell this store's connections from another bridge's when the
        # lock is taken again after a lost connection), and a bounded wait to connect
        pg = pw.PostgresqlDatabase(url, application_name=application_name(), connect_timeout=5, **common)
        try:
            pg.connect()
        except pw.PeeweeException as exc:
            detail = " ".join(str(exc).split())
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {detail}".strip(), connection_lost=True) from exc
        try:
            advisory = PgAdvisoryLock(pg)
            advisory.acquire()
        except BaseException:
            pg.close()
            raise
        return pg, advisory
    raise ValueError(f"unknown database {database!r}: use 'sqlite', ':memory:' or a postgresql:// URL")


def _private(folder: Path) -> None:
    """The data folder is the owner's alone (0700): it holds the history and secrets."""
    missing = []
    while not folder.exists() and folder != folder.parent:  # each missing level 0700
        missing.append(folder)
        folder = folder.parent
    for level in reversed(missing):
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:
            pass
    folder = missing[0] if missing else folder
    info = folder.stat()
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(folder, stat.S_IMODE(info.st_mode) & 0o700)


def _private_files(db_file: Path) -> None:
    """The database file exists 0600 before SQLite opens it (SQLite would create it with the
    umask's mode, 0644 usually), and SQLite gives its -wal and -shm files the database's mode.
    Files left wider by an older version are narrowed. Never through a symlink."""
    fd = os.open(db_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    for extra in (db_file.with_name(db_file.name + "-wal"), db_file.with_name(db_file.name + "-shm")):
        try:
            if stat.S_IMODE(extra.lstat().st_mode) & 0o077 and not extra.is_symlink():
                os.chmod(extra, 0o600)
        except FileNotFoundError:
            pass
