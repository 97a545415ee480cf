"""bridge/channels/events/inbound.py without a homeserver: what an invite of a puppet leaves behind
when its join fails (a refusal, or a homeserver that cannot do it now)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bridge.channels.base.parts import RoomParts
from bridge.channels.events.inbound import Inbound
from bridge.matrix.client import MatrixError
from store import Store
from store.offloop import OffLoop

OWNER, PUPPET, ROOM = "@owner:hs", "@sk_alice:hs", "!room:hs"
INVITE = {
    "type": "m.room.member",
    "state_key": PUPPET,
    "event_id": "$invite",
    "room_id": ROOM,
    "sender": OWNER,
    "content": {"membership": "invite", "is_direct": True},
}


def inbound_whose_join(result) -> tuple[Inbound, Store]:
    """An Inbound whose puppet's join gives `result`; the parts an invite does not reach: None."""
    store = Store.open(":memory:")

    async def join(room_id):
        if isinstance(result, Exception):
            raise result
        return result

    puppet = SimpleNamespace(intent=SimpleNamespace(join=join))

    async def get_puppet(agent):
        return puppet

    async def portal_for(room_id):
        return None

    config = SimpleNamespace(
        bot_user_id="@bot:hs", owners=(OWNER,), agent_for_user_id=lambda u: "alice" if u == PUPPET else None
    )
    rooms = RoomParts(
        config,
        OffLoop(store),
        SimpleNamespace(portal_for=portal_for, portals={}),
        SimpleNamespace(puppet=get_puppet),
        notices=None,
    )
    inbound = Inbound(rooms, commands=None, permissions=None, questions=None, descriptions=None, outage=None)
    return inbound, store


async def test_a_refused_join_leaves_no_channel_and_no_member():
    inbound, store = inbound_whose_join(False)
    try:
        await inbound.member(INVITE, ROOM, OWNER, INVITE["content"])
        assert store.channels() == []
    finally:
        store.close()


async def test_a_join_the_homeserver_could_not_do_raises_so_the_invite_comes_again():
    inbound, store = inbound_whose_join(MatrixError("joining: 502", 502))
    try:
        with pytest.raises(MatrixError):  # the dispatcher refuses the transaction: sent again later
            await inbound.member(INVITE, ROOM, OWNER, INVITE["content"])
        assert store.channels() == []  # and no member that is not in the room
    finally:
        store.close()
