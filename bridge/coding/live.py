"""A message that shows the latest state of something: posted once, then edited in place.

`LiveMessage.show(content)` may be called as often as the agent sends updates; the homeserver
sees the first one at once, then at most one edit per EDIT_INTERVAL with the latest content
(the ones between are skipped, never queued), never more than MAX_EDITS, and `close()` sends
the last state if it is not shown yet. One request at a time per message, so edits land in
order. A failed request is logged and the next one carries the latest state again. A state
already shown is never sent again (the same edit twice: an edit in flight when `close()` came
with the same state, after a rejection or a `!stop`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import aiohttp

from ..channels.base.background import stop_task
from ..matrix.client import MatrixError
from ..matrix.intent import Intent

log = logging.getLogger(__name__)

EDIT_INTERVAL = 1.0  # seconds between two edits of one message
MAX_EDITS = 60  # past this, only the closing state is shown


class LiveMessage:
    def __init__(self, intent: Intent, room_id: str, what: str):
        self.intent = intent
        self.room_id = room_id
        self.what = what  # for the log: "the plan", "a tool call"
        self.event_id: str | None = None
        self.edits = 0
        self._wanted: dict[str, Any] | None = None  # latest content not shown yet
        self._shown: dict[str, Any] | None = None
        self._txn = uuid.uuid4().hex  # the first message's: a retry never posts twice
        self._last = 0.0
        self._pump: asyncio.Task | None = None
        self._news = asyncio.Event()
        self._lock = asyncio.Lock()  # one request at a time: edits land in order

    def show(self, content: dict[str, Any]) -> None:
        """Make `content` the message's state (shown soon)."""
        if content == self._shown and self._wanted is None:
            return
        self._wanted = content
        self._news.set()
        if self._pump is None:
            self._pump = asyncio.create_task(self._run(), name=f"live-{self.what}-{self.room_id}")

    async def close(self, content: dict[str, Any] | None = None) -> str | None:
        """Show the final state now (the latest given, or `content`); the message's event id."""
        if content is not None:
            self._wanted = content if content != self._shown else None
        if self._pump is not None:
            pump, self._pump = self._pump, None
            await stop_task(pump, log, f"the edit loop of {self.what} in {self.room_id}")
        if self._wanted is not None:
            await self._send(self._wanted)
        return self.event_id

    async def _run(self) -> None:
        while True:
            await self._news.wait()
            self._news.clear()
            if self.event_id is not None:
                if self.edits >= MAX_EDITS:
                    continue  # close() shows the last state
                wait = self._last + EDIT_INTERVAL - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if self._wanted is not None:
                await asyncio.shield(self._send(self._wanted))

    async def _send(self, content: dict[str, Any]) -> None:
        async with self._lock:
            await self._send_now(content)

    async def _send_now(self, content: dict[str, Any]) -> None:
        if content is not self._wanted and self._wanted is not None:
            content = self._wanted  # a newer state came while waiting for the lock
        self._wanted = None
        if content == self._shown:
            return  # the request before this one (an edit in flight at close) showed it already
        try:
            if self.event_id is None:
                self.event_id = await self.intent.send(self.room_id, content, txn_id=self._txn)
            else:
                await self.intent.edit(self.room_id, self.event_id, content)
                self.edits += 1
            self._shown = content
        except (TimeoutError, MatrixError, aiohttp.ClientError) as exc:
            log.warning("could not show %s in %s: %s", self.what, self.room_id, exc)
            if self._wanted is None:
                self._wanted = content  # the next update (or close) tries again
        finally:
            self._last = time.monotonic()
