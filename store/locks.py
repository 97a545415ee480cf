"""One running bridge per database.

SQLite: an exclusive flock on a lock file next to the database, held while the
store is open. The kernel drops it when the process dies, so a crashed bridge
never leaves a stale lock behind (unlike a pid file).

PostgreSQL: a session-level advisory lock, held by the store's connection and
likewise released by the server when that connection ends.
"""

import fcntl
import os
from pathlib import Path

import peewee as pw

from .errors import StoreLocked

# Fixed key shared by every Sidekicks bridge: b"sidekick" as a signed 64-bit int.
PG_LOCK_KEY = int.from_bytes(b"sidekick", "big", signed=True)


class FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            if os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, 0o600)  # left wider by an older version
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLocked(f"{self.path} is held by another running bridge") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        # Closing the descriptor releases the flock.
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class PgAdvisoryLock:
    def __init__(self, db: pw.PostgresqlDatabase) -> None:
        self.db = db
        self._held = False

    def acquire(self) -> None:
        cursor = self.db.execute_sql("SELECT pg_try_advisory_lock(%s)", (PG_LOCK_KEY,))
        if not cursor.fetchone()[0]:
            raise StoreLocked("the PostgreSQL database is held by another running bridge")
        self._held = True

    def taken(self) -> None:
        """The lock was taken again on a new connection (resilience.Reconnector)."""
        self._held = True

    def release(self) -> None:
        # Closing the connection would release it too; unlocking first keeps a
        # pooled or lingering connection from holding it.
        if self._held:
            self._held = False
            try:
                self.db.execute_sql("SELECT pg_advisory_unlock(%s)", (PG_LOCK_KEY,))
            except pw.PeeweeException:
                pass  # connection already gone: the server released the lock
