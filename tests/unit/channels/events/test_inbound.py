"""bridge/channels/events/inbound.py without a homeserver: what an invite of a puppet leaves behind
when its join fails (a refusal, or a homeserver that cannot do it now); how far a read-back of a
room goes (page after page back to its time, never further than CATCH_UP_PAGES)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bridge.channels.base.parts import RoomParts
from bridge.channels.events import inbound as inbound_module
from bridge.channels.events.inbound import Inbound, missed_in
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


def message(n: int, ts: int, kind: str = "m.room.message") -> dict:
    return {"type": kind, "event_id": f"${n}", "origin_server_ts": ts, "content": {"body": f"msg {n}"}}


def test_a_page_gives_the_messages_after_the_point_read_back_to():
    page = [message(5, 500), message(4, 400, "m.reaction"), message(3, 300), message(2, 200)]
    missed: list[dict] = []
    assert missed_in(page, None, 300, missed) is True  # msg 2 is before the time: the point reached
    assert [e["event_id"] for e in missed] == ["$5", "$3"]  # messages only, newest first
    missed = []
    assert missed_in(page, "$3", None, missed) is True
    assert [e["event_id"] for e in missed] == ["$5"]
    missed = []
    assert missed_in(page, None, 100, missed) is False  # all of it is after: read on
    assert len(missed) == 3


def reading(pages: list[tuple[int, dict]]):
    """An Inbound reading a room back from `pages` (status, body) in turn; what it dispatched."""
    inbound = Inbound.__new__(Inbound)
    handed: list[str] = []
    asked: list[str] = []

    async def request(method, path):
        asked.append(path)
        return pages[min(len(asked), len(pages)) - 1]

    async def event(e):
        handed.append(e["event_id"])

    inbound.dispatcher = SimpleNamespace(event=event)
    return inbound, SimpleNamespace(intent=SimpleNamespace(request=request)), handed, asked


async def test_a_read_back_goes_page_after_page_to_its_time_and_hands_them_oldest_first():
    # a busy room: its answers' edits fill a page in seconds; the message left behind is pages back
    fillers = [message(100 + n, 2000 - n, "m.reaction") for n in range(50)]
    pages = [
        (200, {"chunk": [message(9, 3000), *fillers], "end": "t1"}),
        (200, {"chunk": fillers, "end": "t2"}),
        (200, {"chunk": [message(8, 1500), message(7, 900)], "end": "t3"}),
    ]
    inbound, puppet, handed, asked = reading(pages)
    assert await inbound.catch_up(puppet, ROOM, None, since_ms=1000) == 200
    assert handed == ["$8", "$9"] and len(asked) == 3
    assert "from=t1" in asked[1] and "from=t2" in asked[2]


async def test_a_read_back_stops_after_its_pages_and_reads_nothing_when_a_page_fails():
    endless = [(200, {"chunk": [message(n, 5000) for n in range(50)], "end": "more"})]
    inbound, puppet, handed, asked = reading(endless)
    assert await inbound.catch_up(puppet, ROOM, None, since_ms=1000) == 200
    assert len(asked) == inbound_module.CATCH_UP_PAGES and handed  # bounded, what it read handed on
    failing = [(200, {"chunk": [message(1, 5000)], "end": "t1"}), (502, {})]
    inbound, puppet, handed, asked = reading(failing)
    assert await inbound.catch_up(puppet, ROOM, None, since_ms=1000) == 502
    assert handed == []  # nothing read: the caller tries again (a transaction refused)


async def test_a_join_reads_one_page_back_to_its_invite():
    inbound, puppet, handed, asked = reading([(200, {"chunk": [message(2, 20), message(1, 10)], "end": "t1"})])
    assert await inbound.catch_up(puppet, ROOM, "$1") == 200
    assert handed == ["$2"] and len(asked) == 1
