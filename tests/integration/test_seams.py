"""The bridge's two seams end to end (real Synapse, real bridge, scripted agents): every incoming
event passes the dispatcher, every outgoing event an Intent, and the faults that lived there."""
from __future__ import annotations

import nio

from bridge import dispatch
from bridge_harness import agent, start_bridge
from matrix_helpers import events_in, login, sync_until, texts_in

ALICE = "@sk_alice:localhost"


async def test_a_message_sent_before_the_puppet_joined_goes_through_the_dispatcher(homeserver, tmp_path,
                                                                                   monkeypatch):
    """The invite waits for the bridge (not running); the owner writes meanwhile. Synapse never
    sends that message to the appservice (no puppet had joined): the puppet reads it back when it
    joins, and it is handled through Dispatcher.event like any other."""
    seen: list[str] = []
    original = dispatch.Dispatcher.event

    async def event(self, e):
        seen.append(e.get("event_id"))
        return await original(self, e)

    monkeypatch.setattr(dispatch.Dispatcher, "event", event)
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    running = None
    try:
        room = (await owner.room_create(name="early", invite=[ALICE], preset=nio.RoomPreset.private_chat)).room_id
        sent = await owner.room_send(room, "m.room.message", {"msgtype": "m.text", "body": "early bird"})
        assert isinstance(sent, nio.RoomSendResponse), sent
        running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
        await sync_until(owner, lambda: any("early bird" in t for t in texts_in(owner, room, ALICE)),
                         timeout=60)
        assert sent.event_id in seen
        assert [e for e in events_in(owner, room) if e.get("sender") == ALICE and e["type"] == "m.room.message"]
    finally:
        await owner.close()
        if running is not None:
            await running.stop()
