"""Errors the store raises: the bridge catches these, never a driver's own."""


class StoreError(Exception):
    """A database operation failed (the driver's error is chained as __cause__)."""


class StoreClosed(StoreError):
    """The store was closed: an answer can finish while the bridge shuts down."""

    def __init__(self, message: str = "store is closed") -> None:
        super().__init__(message)


class StoreLocked(StoreError):
    """The database is held by another running bridge."""
