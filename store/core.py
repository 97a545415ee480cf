"""The core every part of the store receives (docs/architecture.md "The store"): the database
connection, the runner that makes a call one store operation, the models and the compiled hot
queries. A part (channels.py, turns.py, …) is built with the core and uses only these public
names; the Store (store.py) builds the core and the parts.

A store operation is serialised (one connection is shared by all threads, under one lock),
refuses once the store is closed (or its lock lost), and turns driver errors into the store's
(resilience.diagnose). A lost PostgreSQL connection is got back at once and the call made
again, once (`retrying` lets a write that cannot be repeated check whether its first try was
written); while it cannot be got back, calls raise StoreUnavailable at once, with backoff
between reconnection attempts (`retry_in`). A call made inside an operation (a part calling
another's) is part of that operation: same transaction, same retry.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import peewee as pw

from . import migrations, schema
from .compiled import Compiled
from .connect import DB_FILE, Lock, connect
from .errors import StoreClosed, StoreError, StoreLockLost, StoreUnavailable
from .locks import PgAdvisoryLock
from .queries import hot_queries
from .resilience import Reconnector, diagnose

T = TypeVar("T")


class Core:
    """Use Core.open(); the constructor takes an open, locked database."""

    def __init__(self, db: pw.Database, lock: Lock | None, in_memory: bool, path: Path | None = None) -> None:
        self._db: pw.Database | None = db
        self._lock = lock
        self._mutex = threading.RLock()
        self._depth = 0  # operations running on the thread holding the mutex (nested calls)
        self.in_memory = in_memory
        self.path = path  # the SQLite file, for messages
        self._lock_lost: StoreLockLost | None = None
        self._retrying = False
        self._reconnector = (
            Reconnector(db, lock, db.connect_params.get("application_name", ""))
            if isinstance(db, pw.PostgresqlDatabase)
            else None
        )
        self._compiled: dict[Any, Compiled] = {}
        self.models = SimpleNamespace()  # the tables (schema.py), set by open()
        self.queries = SimpleNamespace()  # the hot queries (queries.py), set by open()

    @classmethod
    def open(cls, database: str, folder: str | Path | None = None) -> Core:
        db, lock = connect(database, folder)
        path = Path(folder) / DB_FILE if database == "sqlite" and folder is not None else None
        core = cls(db, lock, in_memory=database == ":memory:", path=path)
        try:
            core.models = schema.build(db)
            migrations.migrate(db, core.models)  # to the current schema version
            core.queries = hot_queries(db, core.models)
        except BaseException as exc:
            core.close()  # releases the lock: a failed open must not hold it
            if isinstance(exc, pw.PeeweeException):
                raise StoreError(f"cannot create the tables: {exc}") from exc
            raise
        return core

    @property
    def db(self) -> pw.Database:
        """The open database (for a part's queries, inside an operation)."""
        if self._db is None:
            raise StoreClosed()
        return self._db

    @property
    def retrying(self) -> bool:
        """The operation runs again after its connection was lost: its first try may have been
        written (a write that cannot be repeated checks)."""
        return self._retrying

    @property
    def reconnector(self) -> Reconnector | None:
        """What gets a lost PostgreSQL connection back (None on SQLite)."""
        return self._reconnector

    def compiled(self, key: Any, build: Callable[..., Any], *names: str) -> Compiled:
        """The query `build` makes, compiled once per store under `key` (compiled.py)."""
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = Compiled(self.db, build, *names)
        return found

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` as one store operation."""
        with self._mutex:
            if self._depth:  # inside an operation: part of it
                return fn(*args, **kwargs)
            if self._db is None:
                raise StoreClosed()
            if self._lock_lost is not None:
                raise self._lock_lost
            self._reconnect_if_lost()
            self._depth += 1
            try:
                return self._run(fn, *args, **kwargs)
            finally:
                self._depth -= 1

    def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        what = getattr(fn, "__name__", "store operation")
        try:
            return fn(*args, **kwargs)
        except pw.PeeweeException as exc:
            problem = diagnose(exc, self.db, what, self.path)
            if not (
                isinstance(problem, StoreUnavailable) and problem.connection_lost and self._reconnector is not None
            ):
                raise problem from exc
        self._reconnector.lost()
        self._reconnect_if_lost()  # at once: the server may already be back
        self._retrying = True
        try:
            return fn(*args, **kwargs)
        except pw.PeeweeException as exc:
            problem = diagnose(exc, self.db, what, self.path)
            if isinstance(problem, StoreUnavailable) and problem.connection_lost:
                self._reconnector.lost()
            raise problem from exc
        finally:
            self._retrying = False

    def close(self) -> None:
        with self._mutex:
            if self._db is None:
                return
            db, self._db = self._db, None
            try:
                if isinstance(self._lock, PgAdvisoryLock):
                    self._lock.release()  # unlock while still connected
                if self._reconnector is not None:
                    self._reconnector.drop()  # whatever state a lost connection left
                else:
                    db.close()
            finally:
                if self._lock is not None:
                    self._lock.release()  # a file lock: only once the database is closed

    # --- the database going away and coming back -----------------------------
    # Every call raises StoreUnavailable while the database cannot be used (nothing written),
    # StoreLockLost once another bridge has taken it (for good). A bridge waits like this:
    #     while not store.available(): await asyncio.sleep(store.retry_in() or 0.25)

    def _reconnect_if_lost(self) -> None:
        if self._reconnector is None or not self._reconnector.broken:
            return
        try:
            self._reconnector.reconnect()
        except StoreLockLost as exc:
            self._lock_lost = exc
            raise

    def retry_in(self) -> float:
        """Seconds until the next reconnection attempt is due (0: connected, or due now)."""
        with self._mutex:
            if self._db is None:
                raise StoreClosed()
            return self._reconnector.retry_in() if self._reconnector is not None else 0.0

    def available(self) -> bool:
        """Whether the database can be used now; tries to reconnect when an attempt is due.
        Raises StoreLockLost once another bridge has taken it, StoreClosed once closed.
        SQLite has no connection to lose: this is always True there, and a StoreUnwritable
        write (disk full, read-only) is simply tried again later, at the caller's pace."""
        with self._mutex:
            if self._db is None:
                raise StoreClosed()
            if self._lock_lost is not None:
                raise self._lock_lost
            try:
                self._reconnect_if_lost()
            except StoreUnavailable:
                return False
            return True

    @property
    def reconnects(self) -> int:
        """How many times a lost connection was got back (for figures and logs)."""
        return self._reconnector.reconnects if self._reconnector is not None else 0


class Part:
    """A part of the store: built with the core (and the parts it calls), it runs each of its
    public calls as one store operation (`operation`)."""

    def __init__(self, core: Core) -> None:
        self.core = core


def operation(method: Callable[..., T]) -> Callable[..., T]:
    """A part's method, run as one store operation (Core.run)."""

    @functools.wraps(method)
    def call(self: Part, *args: Any, **kwargs: Any) -> T:
        return self.core.run(method, self, *args, **kwargs)

    return call
