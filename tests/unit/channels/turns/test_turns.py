"""What a turn tells its agent of the channel (turns.context_reader + turns.unseen_lines):
read in the same database call as the member, chosen once the session is known to be fresh."""

from __future__ import annotations

import pytest

from bridge.channels.turns.context import UnseenMessage
from bridge.channels.turns.turns import context_reader, unseen_lines
from store import Store


@pytest.fixture
def store():
    store = Store.open(":memory:")
    yield store
    store.close()


def _channel(store, *lines):
    """A channel with `alice` as member and messages (sender, text); agents' senders are agents."""
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    ids = [
        store.add_message(channel.id, sender, "user" if sender == "me" else "agent", text).id for sender, text in lines
    ]
    return channel, ids


def _read(store, channel, agent="alice", limit=20, queued=0):
    return context_reader(channel.id, limit, queued)(store, store.member(channel.id, agent))


def _seen_up_to(store, channel, message_id):
    """alice saw up to `message_id` in a session that is not new: what she reads next."""
    store.mark_seen(channel.id, "alice", message_id)
    store.set_fresh(channel.id, "alice", False)
    return _read(store, channel)


def test_a_member_that_saw_part_reads_only_what_came_after(store):
    channel, ids = _channel(
        store, ("me", "one"), ("alice", "first answer"), ("me", "two"), ("bob", "bob says"), ("me", "three")
    )
    read = _seen_up_to(store, channel, ids[1])
    assert unseen_lines(read, "alice", ids[4], False, 20) == [
        UnseenMessage("user", "two"),
        UnseenMessage("bob", "bob says"),
    ]


def test_a_fresh_session_reads_the_newest_whatever_was_seen(store):
    """The member saw everything, but its session turned out new (fresh): it is told the channel
    again, its own answers included (the new session never saw them)."""
    channel, ids = _channel(store, ("me", "one"), ("alice", "first answer"), ("me", "two"))
    read = _seen_up_to(store, channel, ids[1])
    assert unseen_lines(read, "alice", ids[2], True, 20) == [
        UnseenMessage("user", "one"),
        UnseenMessage("alice", "first answer"),
    ]
    assert unseen_lines(read, "alice", ids[2], False, 20) == []


def test_own_answers_are_not_told_to_a_session_that_has_them(store):
    channel, ids = _channel(store, ("me", "one"), ("alice", "mine"), ("bob", "his"), ("me", "now"))
    store.set_fresh(channel.id, "alice", False)
    read = _read(store, channel)
    assert unseen_lines(read, "alice", ids[3], False, 20) == [UnseenMessage("user", "one"), UnseenMessage("bob", "his")]


def test_messages_queued_after_the_current_one_wait_for_their_own_turn(store):
    channel, ids = _channel(store, ("me", "one"), ("me", "two"), ("me", "three"))
    read = _read(store, channel, queued=1)
    assert unseen_lines(read, "alice", ids[1], True, 20) == [UnseenMessage("user", "one")]


def test_the_limit_keeps_the_newest(store):
    channel, ids = _channel(store, *[("me", f"m{i}") for i in range(10)])
    read = _read(store, channel, limit=3)
    assert unseen_lines(read, "alice", ids[9], True, 3) == [UnseenMessage("user", f"m{i}") for i in (6, 7, 8)]


def test_no_context_configured_reads_nothing(store):
    channel, ids = _channel(store, ("me", "one"), ("me", "two"))
    assert _read(store, channel, limit=0) == ([], [])
    assert unseen_lines(([], []), "alice", ids[1], True, 0) == []
    assert unseen_lines(None, "alice", ids[1], True, 20) == []
