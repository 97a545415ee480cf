"""bridge/matrix/presence.py against fake identities: a puppet's presence names no room
(docs/SECURITY.md "What a stranger cannot do") — anyone who shares any room with it sees its status message."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from fake_intent import FakeIntent

from bridge.matrix import presence as presence_module
from bridge.matrix.presence import Presence


async def test_an_answering_puppets_status_names_no_room(monkeypatch):
    monkeypatch.setattr(presence_module, "BUSY_AFTER", 0.0)
    monkeypatch.setattr(presence_module, "IDLE_AFTER", 0.0)
    intent = FakeIntent()
    puppet = SimpleNamespace(agent="alice", user_id="@sk_alice:localhost", intent=intent)
    identities = SimpleNamespace(bot=None, puppets={"alice": puppet}, everyone=lambda: [puppet])
    presence = Presence(identities)
    presence.answering("alice", "secret-project")
    while not intent.presence:
        await asyncio.sleep(0.01)
    assert intent.presence[-1] == ("online", "answering")
    presence.answering("alice", "other-room")  # the same status: nothing new to send
    presence.answering("alice", None)
    while len(intent.presence) < 2:
        await asyncio.sleep(0.01)
    assert intent.presence[-1] == ("online", None)
    assert not any("secret" in str(status) or "#" in str(status) for _, status in intent.presence)
    await presence.stop()
