"""A puppet's Intent for unit tests: sends and edits recorded instead of made (bridge/matrix/intent.py).

Imported as `fake_intent` (tests/ is on sys.path: tests/conftest.py). Used where the tests need the
messages an answer made (bridge/channels/stream.py); the fakes of other tests record other calls
(presence, media, a gate around every request) and stay with them.
"""
from __future__ import annotations

import asyncio

from bridge.matrix.client import MatrixError


class FakeIntent:
    """Records each message and its edits, as a list in order (`events`) and per message
    (`messages`). `fail(kind, n)` decides which requests fail (kind "send" or "edit", n counting
    from 1 per kind); a send waits for `release` (set at first)."""

    user_id = "@sk_alice:localhost"

    def __init__(self, fail=lambda kind, n: False):
        self.fail = fail
        self.messages: dict[str, list[dict]] = {}  # event id → its contents, newest last
        self.events: list[tuple[str, str, dict]] = []  # (kind, event id or the edited one, content)
        self.calls = {"send": 0, "edit": 0}
        self.release = asyncio.Event()
        self.release.set()

    async def send(self, room_id, content, *, event_type="m.room.message", txn_id=None):
        await self.release.wait()
        self.calls["send"] += 1
        if self.fail("send", self.calls["send"]):
            raise MatrixError("sending: M_UNKNOWN the homeserver is busy", 502)
        event_id = f"$m{len(self.messages) + 1}"
        self.messages[event_id] = [content]
        self.events.append(("send", event_id, content))
        return event_id

    async def edit(self, room_id, event_id, new_content, *, txn_id=None):
        self.calls["edit"] += 1
        if self.fail("edit", self.calls["edit"]):
            raise MatrixError("sending: M_UNKNOWN the homeserver is busy", 502)
        self.messages[event_id].append(new_content)
        self.events.append(("edit", event_id, new_content))
        return f"$edit{self.calls['edit']}"

    def shown(self) -> list[str]:
        """What each message shows now."""
        return [contents[-1]["body"] for contents in self.messages.values()]

    def texts(self) -> list[tuple[str, str, str | None]]:
        """(kind, event id or the edited one, body) of every send and edit, in order."""
        return [(kind, target, content.get("body")) for kind, target, content in self.events]
