"""Once a transaction is let through after a gap, the rooms of its owners' messages are read
back before it (bridge.py `_read_back_before`, docs/reliability.md "Restarts"): one Synapse left
behind holds earlier messages. A read-back that failed for now (the homeserver or the store away)
must not count as done: the transaction is refused, so that Synapse sends it again — after the
one it left behind — and its room is read back next time."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from bridge.bridge import Bridge
from bridge.matrix.appservice import Transaction, TransactionRefused

OWNER = "@owner:hs"


def reading(failed: list[str]):
    """A bridge whose read-back of the rooms in `failed` (a list the test may change) fails."""
    bridge = Bridge.__new__(Bridge)  # only what the read-back uses
    bridge.config = SimpleNamespace(owners={OWNER})
    bridge._read_back_at = {}
    asked: list[set[str]] = []

    async def catch_up_rooms(rooms: dict[str, int]):
        asked.append(set(rooms))
        return len([room for room in rooms if room not in failed]), [room for room in rooms if room in failed]

    bridge.inbound = SimpleNamespace(catch_up_rooms=catch_up_rooms)
    return bridge, asked


def message(room: str) -> dict:
    return {"room_id": room, "sender": OWNER, "type": "m.room.message", "origin_server_ts": int(time.time() * 1000)}


async def test_a_room_that_could_not_be_read_back_refuses_the_transaction_and_is_read_again():
    # test_kill9 under load: msg 32 left behind by Synapse, msg 33 let through after the gap; had
    # the read-back of the DM failed (the homeserver slow to answer), msg 33 went first
    failed = ["!dm"]
    bridge, asked = reading(failed)
    transaction = Transaction("9", [message("!dm"), message("!other")])
    gap_at = time.time()
    with pytest.raises(TransactionRefused):
        await bridge._read_back_before(transaction, gap_at)
    assert "!dm" not in bridge._read_back_at and "!other" in bridge._read_back_at
    failed.clear()
    await bridge._read_back_before(transaction, gap_at)  # sent again: the DM is read back now
    assert asked == [{"!dm", "!other"}, {"!dm"}]
    assert "!dm" in bridge._read_back_at


async def test_rooms_read_back_are_not_read_again_for_the_same_gap():
    bridge, asked = reading([])
    gap_at = time.time()
    await bridge._read_back_before(Transaction("9", [message("!dm")]), gap_at)
    await bridge._read_back_before(Transaction("10", [message("!dm")]), gap_at)
    assert asked == [{"!dm"}]


async def test_a_read_back_fails_for_now_only_when_asking_again_may_help():
    # the homeserver or the network away (5xx, no answer): try again; its considered refusal
    # (4xx: the agent is no longer in the room) would refuse every transaction for good
    from bridge.channels.events.inbound import Inbound

    def reader(answer):
        async def request(method, path):
            if isinstance(answer, Exception):
                raise answer
            return answer, {"chunk": []}

        inbound = Inbound.__new__(Inbound)
        puppet = SimpleNamespace(intent=SimpleNamespace(request=request))

        async def puppet_of(name):
            return puppet

        inbound.identities = SimpleNamespace(puppet=puppet_of)
        portal = SimpleNamespace(room_id="!dm", member_names=lambda: ["alice"])
        return inbound._read_back(portal, 0, "after a gap")

    assert await reader(200) is True
    assert await reader(502) is False and await reader(429) is False
    assert await reader(ConnectionResetError("gone")) is False
    assert await reader(403) is None
