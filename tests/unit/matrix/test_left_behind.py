"""bridge/matrix/left_behind.py: which rooms are read back before a transaction once a gap in
the homeserver's numbering was let through."""

from __future__ import annotations

from bridge.matrix.left_behind import HORIZON, READ_BEFORE, rooms_to_read

OWNERS = {"@owner:hs"}


def event(room: str, sender: str = "@owner:hs", origin: int | None = 1_000_000) -> dict:
    e = {"room_id": room, "sender": sender, "type": "m.room.message", "content": {"body": "x"}}
    if origin is not None:
        e["origin_server_ts"] = origin
    return e


def test_nothing_is_read_back_before_any_gap_or_long_after_one():
    assert rooms_to_read([event("!a")], OWNERS, None, {}, 1000.0) == {}
    assert rooms_to_read([event("!a")], OWNERS, 1000.0, {}, 1000.0 + HORIZON + 1) == {}


def test_each_room_of_an_owners_event_is_read_back_once_per_gap():
    gap = 1000.0
    events = [event("!a", origin=999_000), event("!a", origin=999_500), event("!b"), event("!c", "@stranger:hs")]
    rooms = rooms_to_read(events, OWNERS, gap, {}, gap + 1)
    assert rooms == {"!a": int((999.0 - READ_BEFORE) * 1000), "!b": int((gap - READ_BEFORE) * 1000)}
    # read back since the gap: not again; read back before it: again
    assert rooms_to_read([event("!a"), event("!b")], OWNERS, gap, {"!a": gap + 1, "!b": gap - 5}, gap + 2) == {
        "!b": int((gap - READ_BEFORE) * 1000)
    }
    # a new gap: every room once more
    assert set(rooms_to_read([event("!a")], OWNERS, gap + 50, {"!a": gap + 1}, gap + 51)) == {"!a"}


def test_an_event_without_its_time_is_read_back_from_before_the_gap():
    rooms = rooms_to_read([event("!a", origin=None), {"sender": "@owner:hs"}], OWNERS, 2000.0, {}, 2000.5)
    assert rooms == {"!a": int((2000.0 - READ_BEFORE) * 1000)}
