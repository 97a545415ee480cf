"""A puppet's Intent for unit tests: what it would do on the homeserver recorded instead of done
(bridge/matrix/intent.py): messages and their edits, uploads, downloads, presence.

Imported as `fake_intent` (tests/ is on sys.path: tests/conftest.py), by the tests of an answer's
messages (bridge/channels/base/stream.py), of live messages (bridge/coding/live.py), of attachments
(bridge/matrix/media.py), of presence and of the MCP tools that post files.
"""

from __future__ import annotations

import asyncio

from bridge.matrix.client import MatrixError


class FakeIntent:
    """Records each message and its edits, as a list in order (`events`, `sent`) and per message
    (`messages`). `fail(kind, n)` decides which requests fail (kind "send" or "edit", n counting
    from 1 per kind). A send or an edit waits for `gate` (open at first); `in_flight` counts the
    requests under way and `overlaps` those that started while another was. `encrypts` says
    whether rooms are encrypted, `stored` is what a download gets."""

    user_id = "@sk_alice:localhost"

    def __init__(self, fail=lambda kind, n: False, *, encrypts: bool = False, stored: bytes = b""):
        self.fail = fail
        self.messages: dict[str, list[dict]] = {}  # event id → its contents, newest last
        self.events: list[tuple[str, str, dict]] = []  # (kind, event id or the edited one, content)
        self.calls = {"send": 0, "edit": 0}
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = 0
        self.overlaps = 0
        self._encrypts = encrypts
        self.stored = stored
        self.uploads: list[tuple[bytes, str, str]] = []  # (data, content type, file name)
        self.presence: list[tuple[str, str | None]] = []  # (presence, status message)

    async def send(self, room_id, content, *, event_type="m.room.message", txn_id=None):
        await self._request()
        self.calls["send"] += 1
        if self.fail("send", self.calls["send"]):
            raise MatrixError("sending: M_UNKNOWN the homeserver is busy", 502)
        event_id = f"$m{len(self.messages) + 1}"
        self.messages[event_id] = [content]
        self.events.append(("send", event_id, content))
        return event_id

    async def edit(self, room_id, event_id, new_content, *, txn_id=None):
        await self._request()
        self.calls["edit"] += 1
        if self.fail("edit", self.calls["edit"]):
            raise MatrixError("sending: M_UNKNOWN the homeserver is busy", 502)
        self.messages[event_id].append(new_content)
        self.events.append(("edit", event_id, new_content))
        return f"$edit{self.calls['edit']}"

    async def _request(self) -> None:
        self.in_flight += 1
        self.overlaps += self.in_flight > 1
        try:
            await self.gate.wait()
            await asyncio.sleep(0)
        finally:
            self.in_flight -= 1

    async def encrypts(self, room_id: str) -> bool:
        return self._encrypts

    async def upload(self, data: bytes, content_type: str, filename: str) -> str:
        self.uploads.append((data, content_type, filename))
        return "mxc://localhost/up"

    async def download(self, mxc: str, limit: int) -> bytes:
        from bridge.matrix.intent import TooLarge

        if len(self.stored) > limit:
            raise TooLarge(mxc)
        return self.stored

    async def set_presence(self, presence, status_msg=None):
        self.presence.append((presence, status_msg))

    @property
    def sent(self) -> list[tuple[str, dict]]:
        """(kind, content) of every send and edit, in order."""
        return [(kind, content) for kind, _, content in self.events]

    def contents(self) -> list[dict]:
        """The content of every message sent (not the edits), in order."""
        return [content for kind, _, content in self.events if kind == "send"]

    def shown(self) -> list[str]:
        """What each message shows now."""
        return [contents[-1]["body"] for contents in self.messages.values()]

    def texts(self) -> list[tuple[str, str, str | None]]:
        """(kind, event id or the edited one, body) of every send and edit, in order."""
        return [(kind, target, content.get("body")) for kind, target, content in self.events]
