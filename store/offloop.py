"""The store, awaited: every call runs on one database thread, never on the event loop.

Why one thread and not an async driver: the store is peewee on SQLite and PostgreSQL, one
connection shared under a lock (core.py). A thread keeps that code as it is — the same SQL, the
same reconnection and lock handling — and asyncio waits for it; one thread (not a pool) keeps
the calls in the order they were made, which the turn records rely on (a turn's steps are
written in order), and keeps SQLite's single writer. A database that stalls (PostgreSQL
reconnecting, SQLite busy) then slows only what waits for the database: streaming, typing, the
appservice endpoint and every other room go on.

    db = OffLoop(store)
    message = await db.message_by_event(event_id)
    taken = await db.turns.take(...)

The thread is a daemon: a stop never waits for a database that hangs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from .errors import StoreClosed

log = logging.getLogger(__name__)

_NESTED = (
    "turns",
    "settings",
    "schedules",
    "e2ee",
    "places",
    "sessions",
    "spending",
)  # parts of the store with calls of their own


class DatabaseThread:
    """One thread that runs the functions given to it, in order."""

    def __init__(self, name: str = "store") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[], Any]) -> asyncio.Future:
        """`fn()` on the database thread; a future of its result on the calling loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self._closed:
            future.set_exception(StoreClosed())
        else:
            self._queue.put((fn, loop, future))
        return future

    def close(self) -> None:
        """No call runs after the ones already given (those still do); later ones raise StoreClosed."""
        self._closed = True
        self._queue.put(None)

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, loop, future = item
            try:
                result = fn()
            except BaseException as exc:  # handed to the caller, whatever it is
                _settle(loop, future, exc, None)
            else:
                _settle(loop, future, None, result)


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future, exc, result) -> None:
    def settle() -> None:
        if future.done():  # the caller stopped waiting
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed: nobody waits any more
        pass


class OffLoop:
    """`target`'s calls as coroutines run on `thread` (attributes that are not calls as they are)."""

    def __init__(self, target: Any, thread: DatabaseThread | None = None) -> None:
        self._target = target
        self._thread = thread or DatabaseThread()

    @property
    def thread(self) -> DatabaseThread:
        return self._thread

    @property
    def target(self) -> Any:
        """What the calls run on (for a function given to `run` or `soon`)."""
        return self._target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name in _NESTED:
            return OffLoop(value, self._thread)
        if not callable(value):
            return value

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._thread.run(functools.partial(value, *args, **kwargs))

        call.__name__ = name
        return call

    def soon(self, what: str, fn: Callable[[], Any]) -> None:
        """`fn` on the thread, not waited for (after every call made before it); a failure is
        logged as `what` not written."""

        def done(future: asyncio.Future) -> None:
            if not future.cancelled() and future.exception() is not None:
                log.info("%s not written: %s", what, future.exception())

        self._thread.run(fn).add_done_callback(done)

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Any function of the store (several calls, one after the other) on the thread."""
        return await self._thread.run(fn)
