"""Channels, members, transactions, agent commands and values."""

import pytest

from store import Channel, Member


def test_create_and_find_a_channel(store):
    channel = store.create_channel("!room:hs", "general")
    assert isinstance(channel, Channel)
    assert (channel.room_id, channel.name, channel.direct_agent) == ("!room:hs", "general", None)
    assert channel.created > 1_600_000_000_000  # milliseconds, not seconds
    assert store.channel(channel.id) == channel
    assert store.channel_by_room("!room:hs") == channel
    assert store.channel("nope") is None
    assert store.channel_by_room("!other:hs") is None


def test_a_direct_channel_keeps_its_agent(store):
    channel = store.create_channel("!dm:hs", "", direct_agent="alice")
    assert store.channel(channel.id).direct_agent == "alice"


def test_records_are_frozen(store):
    channel = store.create_channel("!room:hs", "general")
    with pytest.raises(AttributeError):
        channel.name = "other"  # type: ignore[misc]


def test_one_channel_per_room(store):
    store.create_channel("!room:hs", "general")
    with pytest.raises(ValueError, match="already has a channel"):
        store.create_channel("!room:hs", "again")
    assert len(store.channels()) == 1


def test_channels_in_creation_order(store):
    made = [store.create_channel(f"!r{i}:hs", f"c{i}") for i in range(5)]
    assert store.channels() == made


def test_rename_channel(store):
    channel = store.create_channel("!room:hs", "general")
    store.rename_channel(channel.id, "random")
    assert store.channel(channel.id).name == "random"
    store.rename_channel("unknown", "x")  # nothing to rename: no error
    assert [c.name for c in store.channels()] == ["random"]


def test_delete_channel_deletes_its_members_and_messages_only(store):
    gone = store.create_channel("!gone:hs", "gone")
    kept = store.create_channel("!kept:hs", "kept")
    for channel in (gone, kept):
        store.add_member(channel.id, "alice")
        store.add_message(channel.id, "me", "user", "hello", [f"$e-{channel.room_id}"])
        store.add_message(channel.id, "alice", "agent", "hi", [f"$a-{channel.room_id}"])
    store.delete_channel(gone.id)
    assert store.channel(gone.id) is None
    assert store.channel_by_room("!gone:hs") is None
    assert store.members(gone.id) == []
    assert store.count_messages(gone.id) == 0
    assert store.message_by_event("$e-!gone:hs") is None
    assert store.last_agent_sender(gone.id) is None
    assert [m.channel_id for m in store.members_of_agent("alice")] == [kept.id]
    assert store.count_messages() == 2
    assert store.message_by_event("$e-!kept:hs").channel_id == kept.id
    store.delete_channel(gone.id)  # twice: no error
    # The room can get a new channel.
    assert store.create_channel("!gone:hs", "again").room_id == "!gone:hs"


def test_members_in_join_order_and_add_is_idempotent(store):
    channel = store.create_channel("!room:hs", "general")
    names = ["zoe", "alice", "mike", "bob"]
    for name in names:
        assert store.add_member(channel.id, name) == Member(channel.id, name, None, False, None)
    store.set_session(channel.id, "alice", "s1", True)
    again = store.add_member(channel.id, "alice")
    assert again == Member(channel.id, "alice", "s1", True, None)  # kept, not reset
    assert [m.agent for m in store.members(channel.id)] == names


def test_add_member_to_a_missing_channel(store):
    with pytest.raises(LookupError, match="no channel"):
        store.add_member("missing", "alice")


def test_remove_member(store):
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    store.add_member(channel.id, "bob")
    store.remove_member(channel.id, "alice")
    assert store.member(channel.id, "alice") is None
    assert [m.agent for m in store.members(channel.id)] == ["bob"]
    store.remove_member(channel.id, "alice")  # twice: no error
    # Rejoining puts the agent last, with a clean slate.
    store.add_member(channel.id, "alice")
    assert [m.agent for m in store.members(channel.id)] == ["bob", "alice"]


def test_member_state(store):
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    store.set_session(channel.id, "alice", "session-1", True)
    assert store.member(channel.id, "alice") == Member(channel.id, "alice", "session-1", True, None)
    store.set_fresh(channel.id, "alice", False)
    assert store.member(channel.id, "alice").fresh is False
    message = store.add_message(channel.id, "me", "user", "hi")
    store.set_last_seen(channel.id, "alice", message.id)
    assert store.member(channel.id, "alice").last_seen == message.id
    store.set_session(channel.id, "alice", None, False)
    assert store.member(channel.id, "alice") == Member(channel.id, "alice", None, False, message.id)
    assert store.member(channel.id, "bob") is None


def test_a_session_keeps_the_working_directory_it_was_opened_in(store):
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    assert store.member(channel.id, "alice").session_cwd is None
    store.set_session(channel.id, "alice", "s1", True, cwd="/home/me/work")
    assert store.member(channel.id, "alice") == Member(channel.id, "alice", "s1", True, None, "/home/me/work")
    assert store.members(channel.id)[0].session_cwd == "/home/me/work"
    store.set_session(channel.id, "alice", None, False)  # no session: no directory either
    assert store.member(channel.id, "alice").session_cwd is None


def test_an_older_store_gains_the_session_directory(open_durable):
    # a store made before sessions kept their directory: sk_member without session_cwd
    store = open_durable()
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    store.set_session(channel.id, "alice", "old-session", False)
    store.core.db.execute_sql("ALTER TABLE sk_member DROP COLUMN session_cwd")
    store.core.db.execute_sql("UPDATE sk_schema SET version = 5")  # the version before the column
    store.close()
    again = open_durable()
    member = again.member(channel.id, "alice")
    assert (member.session_id, member.session_cwd) == ("old-session", None)  # used as before
    again.set_session(channel.id, "alice", "new-session", True, cwd="/w")
    assert again.member(channel.id, "alice").session_cwd == "/w"


def test_updating_a_removed_member_is_a_no_op(store):
    # An answer can finish after its agent was removed from the channel.
    channel = store.create_channel("!room:hs", "general")
    store.set_session(channel.id, "ghost", "s", True)
    store.set_fresh(channel.id, "ghost", True)
    store.set_last_seen(channel.id, "ghost", "x")
    assert store.member(channel.id, "ghost") is None
    assert store.members(channel.id) == []


def test_member_state_is_per_channel(store):
    one = store.create_channel("!one:hs", "one")
    two = store.create_channel("!two:hs", "two")
    store.add_member(one.id, "alice")
    store.add_member(two.id, "alice")
    store.add_member(two.id, "bob")
    store.set_session(one.id, "alice", "s-one", False)
    assert store.member(two.id, "alice").session_id is None
    assert store.members_of_agent("alice") == [
        Member(one.id, "alice", "s-one", False, None),
        Member(two.id, "alice", None, False, None),
    ]
    assert store.members_of_agent("nobody") == []


def test_transactions_seen(store):
    assert store.txn_seen("t1") is False
    store.mark_txn("t1")
    store.mark_txn("t1")  # idempotent
    assert store.txn_seen("t1") is True
    assert store.txn_seen("t2") is False


def test_agent_commands(store):
    assert store.agent_commands("alice") is None
    commands = [{"name": "plan", "description": "Make a plan", "input": {"hint": "goal"}}]
    store.set_agent_commands("alice", commands)
    assert store.agent_commands("alice") == commands
    store.set_agent_commands("alice", [])  # announced none: known, but empty
    assert store.agent_commands("alice") == []
    assert store.agent_commands("bob") is None


def test_values(store):
    assert store.get_value("space") is None
    store.set_value("space", "!space:hs")
    store.set_value("other", "x")
    store.set_value("space", "!new:hs")
    assert store.get_value("space") == "!new:hs"
    assert store.get_value("other") == "x"


def test_text_round_trips_unicode(store):
    channel = store.create_channel("!é:hs", "général 🚀")
    store.set_value("clé", "välue ✓")
    assert store.channel(channel.id).name == "général 🚀"
    assert store.get_value("clé") == "välue ✓"
