"""Work the bridge starts and does not wait for (a command answered after its transaction): a
failure is logged with what it was, never lost silently; `close` cancels what still runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator


class Background:
    def __init__(self, log: logging.Logger):
        self._log = log
        self._tasks: set[asyncio.Task] = set()

    def __iter__(self) -> Iterator[asyncio.Task]:
        return iter(list(self._tasks))

    def start(self, coroutine: Coroutine, what: str) -> asyncio.Task:
        async def run() -> None:
            try:
                await coroutine
            except Exception:
                self._log.exception("%s failed", what)

        task = asyncio.create_task(run(), name=what)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def stop_task(task: asyncio.Task, log: logging.Logger, what: str) -> None:
    """Cancel `task` (an edit loop) and wait until it has stopped. Its own failure is logged
    (`what` it was); a cancellation of the caller itself still goes through."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:
        log.exception("%s had stopped", what)
