"""When the database goes away: what an error means, and getting the connection back.

`diagnose(exc, db, path)` turns a driver error into the store's own:

- `StoreUnavailable`: the database cannot be used *for now* — PostgreSQL restarting or
  unreachable, the connection lost. The call that raised it wrote nothing; the caller waits
  (`Store.retry_in()`) and tries again.
- `StoreUnwritable` (a `StoreUnavailable`): the SQLite file cannot be written — disk full,
  read-only file system, I/O error. Reads still work; nothing of the failed call was written.
- anything else stays a plain `StoreError` (a bug, a constraint): waiting will not help.

`Reconnector` gets a lost PostgreSQL connection back, with backoff between attempts, and takes
the one-bridge advisory lock again. If another bridge took the lock meanwhile, it raises
`StoreLockLost` and the store refuses every later call: two bridges must never share a
database. A lock still held by this store's own dead connection (a backend the server has not
noticed is gone yet) is not another bridge: that backend is ended and the lock taken.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from pathlib import Path

import peewee as pw

from .errors import StoreError, StoreLockLost, StoreUnavailable, StoreUnwritable
from .locks import PG_LOCK_KEY

# SQLSTATE classes/codes of a connection that is gone or a server that cannot take one now
_PG_CONNECTION_CLASSES = ("08",)  # connection exception
_PG_CONNECTION_CODES = {"57P01", "57P02", "57P03", "53300"}  # admin/crash shutdown, starting up, too many

# SQLite result codes (and their extended forms) of a file that cannot be used for now
_SQLITE_UNAVAILABLE = (
    "SQLITE_FULL",
    "SQLITE_READONLY",
    "SQLITE_IOERR",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_CANTOPEN",
)

FIRST_DELAY = 0.25  # seconds before the second reconnection attempt; doubles each time
MAX_DELAY = 5.0


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception behind a peewee one (peewee passes it as its first arg)."""
    if exc.args and isinstance(exc.args[0], BaseException):
        return exc.args[0]
    return exc.__cause__ or exc.__context__ or exc


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc`, the driver errors behind it and the errors it happened during, nearest first."""
    found: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(found) < 20:
        current = todo.pop(0)
        if current is None or any(current is seen for seen in found):
            continue
        found.append(current)
        if current.args and isinstance(current.args[0], BaseException):
            todo.append(current.args[0])
        todo += [current.__cause__, current.__context__]
    return found


def _pg_connection_gone(db: pw.Database) -> bool:
    conn = getattr(db._state, "conn", None)  # type: ignore[attr-defined]  # noqa: SLF001 (peewee: no public name)
    return conn is None or bool(getattr(conn, "closed", 0))


def diagnose(exc: BaseException, db: pw.Database, what: str, path: Path | None = None) -> StoreError:
    """The store error `exc` (a peewee error raised by `what`) stands for."""
    error = _driver_error(exc)
    detail = " ".join(str(error).split()) or type(error).__name__
    if isinstance(db, pw.PostgresqlDatabase):
        code = getattr(error, "pgcode", None) or ""
        lost = (
            code.startswith(_PG_CONNECTION_CLASSES)
            or code in _PG_CONNECTION_CODES
            or isinstance(exc, pw.InterfaceError)
            or _pg_connection_gone(db)
            or (isinstance(exc, pw.OperationalError) and not code)
        )
        if lost:
            return StoreUnavailable(f"{what}: the PostgreSQL server cannot be reached ({detail})", connection_lost=True)
        return StoreError(f"{what} failed: {detail}")
    for cause in _chain(exc):
        # SQLite rolls a transaction back by itself on some errors (a full disk): peewee's own
        # rollback then fails ("no transaction is active") with the real error as its context
        if isinstance(cause, sqlite3.Error) and (getattr(cause, "sqlite_errorname", "") or "").startswith(
            _SQLITE_UNAVAILABLE
        ):
            error, detail = cause, " ".join(str(cause).split())
            break
    if isinstance(error, sqlite3.Error):
        name = getattr(error, "sqlite_errorname", "") or ""
        where = str(path) if path is not None else "the SQLite database"
        if name.startswith("SQLITE_FULL"):
            return StoreUnwritable(f"{what}: cannot write {where}: the disk is full", disk_full=True)
        if name.startswith("SQLITE_READONLY"):
            return StoreUnwritable(f"{what}: cannot write {where}: it is read-only")
        if name.startswith("SQLITE_IOERR"):
            return StoreUnwritable(f"{what}: cannot write {where}: a disk I/O error ({name})")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN")):
            return StoreUnavailable(f"{what}: {where} cannot be used now ({detail})")
    return StoreError(f"{what} failed: {detail}")


def application_name() -> str:
    """Names this store's connections, so that its own dead backend can be told from another
    bridge's (pg_stat_activity.application_name)."""
    return f"sidekicks-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class Reconnector:
    """Brings a lost PostgreSQL connection back and takes the advisory lock again."""

    def __init__(self, db: pw.PostgresqlDatabase, lock, app_name: str) -> None:
        self.db = db
        self.lock = lock
        self.app_name = app_name
        self.broken = False
        self.attempts = 0  # failed attempts since the connection was lost
        self.reconnects = 0  # connections got back, over the store's life
        self._retry_at = 0.0

    def lost(self) -> None:
        """The connection is gone: the next attempt may be made at once."""
        if not self.broken:
            self.broken, self.attempts, self._retry_at = True, 0, 0.0

    def retry_in(self) -> float:
        """Seconds until the next attempt is due (0 when connected or due now)."""
        return max(0.0, self._retry_at - time.monotonic()) if self.broken else 0.0

    def reconnect(self, force: bool = False) -> None:
        """One attempt (when due, or `force`): returns connected and locked, or raises
        StoreUnavailable (try later) or StoreLockLost (another bridge has the database)."""
        if not self.broken:
            return
        if not force and time.monotonic() < self._retry_at:
            raise StoreUnavailable(
                f"the PostgreSQL server cannot be reached; next attempt in {self.retry_in():.1f} s",
                connection_lost=True,
            )
        self.drop()
        try:
            self.db.connect()
            self._take_lock()
        except StoreLockLost:
            self.drop()
            raise
        except pw.PeeweeException as exc:
            self.drop()
            self.attempts += 1
            delay = min(MAX_DELAY, FIRST_DELAY * 2 ** (self.attempts - 1))
            self._retry_at = time.monotonic() + delay
            detail = " ".join(str(_driver_error(exc)).split())
            raise StoreUnavailable(
                f"the PostgreSQL server cannot be reached ({detail}); next attempt in {delay:.2f} s",
                connection_lost=True,
            ) from exc
        self.broken, self.attempts = False, 0
        self.reconnects += 1

    def drop(self) -> None:
        """Forget the connection whatever state it is in (peewee would refuse to close a
        connection with a transaction open, and a dead one cannot roll back)."""
        conn = self.db._state.conn  # type: ignore[attr-defined]  # noqa: SLF001 (peewee: no public name)
        self.db.dispose()
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _take_lock(self) -> None:
        if self._try_lock():
            return
        # held: by a backend of this store that the server still thinks alive, or by another
        # bridge. Only our own backends carry our application_name.
        rows = self.db.execute_sql(
            "SELECT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s "
            "AND l.objsubid = 1 AND a.pid <> pg_backend_pid()",
            (_high(PG_LOCK_KEY), _low(PG_LOCK_KEY)),
        ).fetchall()
        ours = [pid for pid, name in rows if name == self.app_name]
        if ours and len(ours) == len(rows):
            for pid in ours:
                self.db.execute_sql("SELECT pg_terminate_backend(%s)", (pid,))
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if self._try_lock():
                    return
                time.sleep(0.05)
        raise StoreLockLost(
            "another bridge took the PostgreSQL database while this bridge's connection "
            "was lost: this bridge stops using it (two bridges must never share a database)"
        )

    def _try_lock(self) -> bool:
        if self.db.execute_sql("SELECT pg_try_advisory_lock(%s)", (PG_LOCK_KEY,)).fetchone()[0]:
            self.lock.taken()
            return True
        return False


def _high(key: int) -> int:
    """pg_locks shows a bigint advisory key as two oids: the high and the low 32 bits."""
    return (key & 0xFFFFFFFFFFFFFFFF) >> 32


def _low(key: int) -> int:
    return key & 0xFFFFFFFF
