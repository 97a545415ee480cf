"""Errors the store raises: the bridge catches these, never a driver's own."""


class StoreError(Exception):
    """A database operation failed (the driver's error is chained as __cause__)."""


class StoreClosed(StoreError):
    """The store was closed: an answer can finish while the bridge shuts down."""

    def __init__(self, message: str = "store is closed") -> None:
        super().__init__(message)


class StoreLocked(StoreError):
    """The database is held by another running bridge."""


class StoreLockLost(StoreLocked):
    """While its connection was lost, another bridge took the database: this store refuses
    every later call (the bridge must stop; two bridges never share a database)."""


class StoreUnavailable(StoreError):
    """The database cannot be used for now (PostgreSQL restarting or unreachable, the SQLite
    file unwritable): the call that raised it wrote nothing. Wait `Store.retry_in()` seconds and
    try again; `Store.available()` says when it is back."""

    def __init__(self, message: str, connection_lost: bool = False) -> None:
        super().__init__(message)
        self.connection_lost = connection_lost


class StoreUnwritable(StoreUnavailable):
    """The SQLite file cannot be written (disk full, read-only, I/O error); reads still work.
    `disk_full`: because its disk is full (the owner is told so: there is something to do)."""

    def __init__(self, message: str, disk_full: bool = False) -> None:
        super().__init__(message)
        self.disk_full = disk_full
