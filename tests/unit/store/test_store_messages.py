"""Messages: appending, the unseen context, lookups by event, counts."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import Message


@pytest.fixture
def channel(store):
    return store.create_channel("!room:hs", "general")


def fill(store, channel_id, count, prefix="m"):
    return [store.add_message(channel_id, "me", "user", f"{prefix}{i}") for i in range(count)]


def test_add_message_returns_what_is_stored(store, channel):
    message = store.add_message(channel.id, "alice", "agent", "hello *world*", ["$a", "$b"])
    assert isinstance(message, Message)
    assert (message.channel_id, message.sender, message.role, message.text) == (
        channel.id,
        "alice",
        "agent",
        "hello *world*",
    )
    assert message.event_ids == ("$a", "$b")
    assert message.created > 1_600_000_000_000
    assert store.last_messages(channel.id, 1) == [message]


def test_event_ids_are_optional_and_any_sequence(store, channel):
    plain = store.add_message(channel.id, "me", "user", "no events")
    from_list = store.add_message(channel.id, "me", "user", "list", ["$x"])
    assert plain.event_ids == () and from_list.event_ids == ("$x",)
    assert [m.event_ids for m in store.last_messages(channel.id, 5)] == [(), ("$x",)]


def test_bad_role_or_event_ids(store, channel):
    with pytest.raises(ValueError, match="role"):
        store.add_message(channel.id, "me", "system", "x")
    with pytest.raises(TypeError, match="event_ids"):
        store.add_message(channel.id, "me", "user", "x", "$one-string")
    assert store.count_messages() == 0


def test_add_message_to_a_missing_channel(store):
    with pytest.raises(LookupError, match="no channel"):
        store.add_message("missing", "me", "user", "x", ["$e"])
    assert store.count_messages() == 0
    assert store.message_by_event("$e") is None


def test_messages_made_in_one_millisecond_keep_their_order(store, channel):
    made = fill(store, channel.id, 300)
    assert store.last_messages(channel.id, 300) == made
    assert [m.id for m in made] == sorted(m.id for m in made)


def test_messages_after_returns_the_last_ones_in_order(store, channel):
    made = fill(store, channel.id, 30)
    assert store.messages_after(channel.id, None, 100) == made
    assert store.messages_after(channel.id, None, 5) == made[-5:]
    assert store.messages_after(channel.id, made[9].id, 100) == made[10:]
    # More unseen than the limit: the LAST ones, oldest of them first.
    assert store.messages_after(channel.id, made[9].id, 4) == made[-4:]
    assert store.messages_after(channel.id, made[-1].id, 10) == []
    assert store.messages_after(channel.id, made[0].id, 0) == []
    assert store.messages_after(channel.id, None, -1) == []


def test_messages_after_an_id_that_is_gone_or_from_elsewhere(store, channel):
    other = store.create_channel("!other:hs", "other")
    before = fill(store, channel.id, 3, "a")
    elsewhere = store.add_message(other.id, "me", "user", "elsewhere")
    after = fill(store, channel.id, 3, "b")
    # The comparison is on ids, which sort by time, whatever channel they came from.
    assert store.messages_after(channel.id, elsewhere.id, 10) == after
    assert store.messages_after(other.id, before[-1].id, 10) == [elsewhere]


def test_last_messages(store, channel):
    assert store.last_messages(channel.id, 5) == []
    made = fill(store, channel.id, 8)
    assert store.last_messages(channel.id, 3) == made[-3:]
    assert store.last_messages(channel.id, 50) == made
    assert store.last_messages(channel.id, 0) == []


def test_channels_do_not_mix(store, channel):
    other = store.create_channel("!other:hs", "other")
    mine, theirs = [], []
    for i in range(10):
        mine.append(store.add_message(channel.id, "me", "user", f"mine {i}"))
        theirs.append(store.add_message(other.id, "me", "user", f"theirs {i}"))
    assert store.last_messages(channel.id, 4) == mine[-4:]
    assert store.messages_after(other.id, theirs[2].id, 100) == theirs[3:]
    assert store.count_messages(channel.id) == 10
    assert store.count_messages(other.id) == 10
    assert store.count_messages() == 20
    assert store.count_messages("missing") == 0


def test_message_by_any_of_its_events(store, channel):
    first = store.add_message(channel.id, "alice", "agent", "long answer", ["$p1", "$p2", "$p3"])
    second = store.add_message(channel.id, "me", "user", "q", ["$q"])
    assert store.message_by_event("$p1") == first
    assert store.message_by_event("$p3") == first
    assert store.message_by_event("$q") == second
    assert store.message_by_event("$nope") is None


def test_a_repeated_event_id_keeps_both_messages(store, channel):
    # Never lose a finished message over a duplicate id; the newest wins.
    store.add_message(channel.id, "me", "user", "old", ["$dup"])
    new = store.add_message(channel.id, "me", "user", "new", ["$dup"])
    assert store.message_by_event("$dup") == new
    assert store.count_messages(channel.id) == 2


def test_last_agent_sender(store, channel):
    assert store.last_agent_sender(channel.id) is None
    store.add_message(channel.id, "me", "user", "@alice hi")
    assert store.last_agent_sender(channel.id) is None
    store.add_message(channel.id, "alice", "agent", "hello")
    store.add_message(channel.id, "bob", "agent", "hey")
    store.add_message(channel.id, "alice", "user", "a user named like an agent")
    assert store.last_agent_sender(channel.id) == "bob"
    other = store.create_channel("!other:hs", "other")
    store.add_message(other.id, "carol", "agent", "elsewhere")
    assert store.last_agent_sender(channel.id) == "bob"


def test_long_and_unicode_text_round_trips(store, channel):
    text = "é🚀\n\t'\"\\%s?" * 20000
    message = store.add_message(channel.id, "ünï", "user", text, ["$é"])
    assert store.message_by_event("$é") == message
    assert store.last_messages(channel.id, 1)[0].text == text


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.sampled_from(["a", "b"]), st.sampled_from(["user", "agent"])),
            st.tuples(st.just("query"), st.sampled_from(["a", "b"]), st.integers(-1, 12), st.integers(0, 8)),
        ),
        max_size=40,
    )
)
def test_messages_after_matches_a_list_model(store, steps):
    # A fresh pair of channels per example: the store fixture is shared.
    channels = {key: store.create_channel(f"!{key}-{id(steps)}-{len(store.channels())}", key) for key in "ab"}
    model: dict[str, list[Message]] = {"a": [], "b": []}
    for step in steps:
        if step[0] == "add":
            _, key, role = step
            model[key].append(store.add_message(channels[key].id, "x", role, str(len(model[key]))))
        else:
            _, key, after, limit = step
            history = model[key]
            after_id = history[after].id if 0 <= after < len(history) else None
            expected = history[after + 1 :] if after_id else history
            expected = expected[-limit:] if limit else []
            assert store.messages_after(channels[key].id, after_id, limit) == expected
            agents = [m.sender for m in history if m.role == "agent"]
            assert store.last_agent_sender(channels[key].id) == (agents[-1] if agents else None)
    for key in "ab":
        assert store.last_messages(channels[key].id, 100) == model[key]


def test_a_message_is_deleted_by_any_of_its_event_ids(store):
    channel = store.create_channel("!room:hs", "general")
    kept = store.add_message(channel.id, "@me:hs", "user", "keep me", ["$k"])
    store.add_message(channel.id, "alice", "agent", "long answer", ["$a1", "$a2"])
    assert store.delete_message_by_event("$a2") is True
    assert store.message_by_event("$a1") is None and store.message_by_event("$a2") is None
    assert store.last_messages(channel.id, 10) == [kept]
    assert store.delete_message_by_event("$a1") is False
    assert store.delete_message_by_event("$never") is False


def test_add_event_makes_a_message_found_by_its_later_event(store, channel):
    message = store.add_message(channel.id, "@me:hs", "user", "from an editor", ["sk-acp-1"])
    store.add_event(channel.id, message.id, "$quoted")
    store.add_event(channel.id, message.id, "$quoted")  # once
    found = store.message_by_event("$quoted")
    assert found is not None and found.id == message.id
    assert found.event_ids == ("sk-acp-1", "$quoted")
    assert store.message_by_event("sk-acp-1") == found
    store.add_event(channel.id, "no-such-message", "$other")
    assert store.message_by_event("$other") is None
