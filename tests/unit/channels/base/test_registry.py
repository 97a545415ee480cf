"""bridge/channels/base/registry.py: the open channels of one bridge — a portal made once per room,
from the store; the turns waiting for an agent and the courtesy requests belong to the bridge
that owns them, not to the process (two bridges share none of it)."""

from __future__ import annotations

import asyncio

from bridge.channels.base.registry import Channels
from store import Store
from store.offloop import OffLoop


async def test_a_channel_rooms_portal_is_made_once_from_the_store_and_other_rooms_have_none():
    store = Store.open(":memory:")
    try:
        channel = store.create_channel("!r:hs", "general")
        store.add_member(channel.id, "alice")
        made = []

        def make(channel, members):
            made.append((channel.room_id, members))
            return object()

        channels = Channels(OffLoop(store), make)
        first = await channels.portal_for("!r:hs")
        assert await channels.portal_for("!r:hs") is first and channels.portals == {"!r:hs": first}
        assert made == [("!r:hs", ["alice"])]
        assert await channels.portal_for("!elsewhere:hs") is None and "!elsewhere:hs" not in channels.portals
    finally:
        store.close()


async def test_two_bridges_in_one_process_share_no_queue_and_no_task():
    one, two = Channels(None, lambda *a: None), Channels(None, lambda *a: None)
    one.queue("alice").append("a turn")
    assert two.waiting.get("alice") is None and one.waiting == {"alice": ["a turn"]}
    done = asyncio.Event()

    async def receipt():
        await done.wait()

    one.courtesy(receipt())
    assert len(one.courtesy_tasks()) == 1 and two.courtesy_tasks() == []
    done.set()
    await asyncio.gather(*one.courtesy_tasks())
    await asyncio.sleep(0)
    assert one.courtesy_tasks() == []  # a finished request is forgotten
