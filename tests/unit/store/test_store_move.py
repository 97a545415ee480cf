"""store.move_channel: a channel whose room was upgraded moves to the new room with its members,
sessions, settings and history (bridge/channels/events/upgrade.py)."""

import pytest


def test_a_channel_moves_to_its_new_room_with_everything(store):
    channel = store.create_channel("!old:hs", "general")
    store.add_member(channel.id, "alice")
    store.set_session(channel.id, "alice", "sess-1", fresh=False)
    store.add_message(channel.id, "me", "user", "hello")
    moved = store.move_channel(channel.id, "!new:hs")
    assert (moved.id, moved.room_id, moved.name) == (channel.id, "!new:hs", "general")
    assert store.channel_by_room("!old:hs") is None and store.channel_by_room("!new:hs") == moved
    assert store.member(channel.id, "alice").session_id == "sess-1"
    assert [m.text for m in store.last_messages(channel.id, 5)] == ["hello"]


def test_an_empty_channel_already_in_the_new_room_makes_way_one_with_history_does_not(store):
    channel = store.create_channel("!old:hs", "general")
    early = store.create_channel("!new:hs", "!new:hs")  # an invite that came before the tombstone
    store.add_member(early.id, "alice")
    assert store.move_channel(channel.id, "!new:hs").id == channel.id
    assert store.channel(early.id) is None
    other = store.create_channel("!other:hs", "other")
    busy = store.create_channel("!busy:hs", "busy")
    store.add_message(busy.id, "me", "user", "kept")
    with pytest.raises(ValueError):
        store.move_channel(other.id, "!busy:hs")
    assert store.channel_by_room("!busy:hs").id == busy.id and store.channel_by_room("!other:hs").id == other.id
