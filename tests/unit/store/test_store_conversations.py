"""Conversations in the store (docs/architecture.md "Conversations and threads"): messages, the last
speaker, each member's session and what it has seen are kept per conversation — the main timeline
("") or a thread (its root's event id); a thread's messages start with its root and hold no later
main-timeline message."""

RUN = "run-1"


def texts(messages):
    return [m.text for m in messages]


def test_a_threads_messages_are_its_root_and_its_own(store, channel):
    store.add_message(channel.id, "@me:hs", "user", "root question", ["$root"])
    store.add_message(channel.id, "alice", "agent", "main answer", ["$a1"])
    store.add_message(channel.id, "@me:hs", "user", "in the thread", ["$t1"], conversation="$root")
    store.add_message(channel.id, "bob", "agent", "thread answer", ["$t2"], conversation="$root")
    store.add_message(channel.id, "@me:hs", "user", "later in main", ["$m2"])
    assert texts(store.messages_in(channel.id, "", None, 10)) == ["root question", "main answer", "later in main"]
    assert texts(store.messages_in(channel.id, "$root", None, 10)) == [
        "root question",
        "in the thread",
        "thread answer",
    ]
    assert store.message_by_event("$t1").conversation == "$root"
    assert store.message_by_event("$a1").conversation == ""
    # after a message seen: the root is not told again
    seen = store.message_by_event("$t1").id
    assert texts(store.messages_in(channel.id, "$root", seen, 10)) == ["thread answer"]
    # the newest within the limit (the root falls out of a long thread like any message)
    assert texts(store.messages_in(channel.id, "$root", None, 2)) == ["in the thread", "thread answer"]
    # every conversation at once, as before
    assert len(store.messages_after(channel.id, None, 10)) == 5


def test_a_thread_on_a_message_not_stored_is_its_own_messages(store, channel):
    store.add_message(channel.id, "@me:hs", "user", "in a thread", ["$t1"], conversation="$unknown")
    assert texts(store.messages_in(channel.id, "$unknown", None, 10)) == ["in a thread"]
    other = store.create_channel("!other:hs", "other")
    store.add_message(other.id, "@me:hs", "user", "elsewhere", ["$root"])
    assert texts(store.messages_in(channel.id, "$root", None, 10)) == []  # another channel's root


def test_the_last_speaker_is_counted_per_conversation(store, channel):
    store.add_message(channel.id, "@me:hs", "user", "hi", ["$root"])
    store.add_message(channel.id, "alice", "agent", "alice in main", ["$a1"])
    assert store.last_agent_sender(channel.id, "$root") is None  # the owner's root, nobody spoke there
    store.add_message(channel.id, "bob", "agent", "bob in the thread", ["$b1"], conversation="$root")
    assert store.last_agent_sender(channel.id) == "alice"
    assert store.last_agent_sender(channel.id, "$root") == "bob"
    # a thread under an agent's answer: that agent spoke there first
    assert store.last_agent_sender(channel.id, "$a1") == "alice"


def test_each_member_has_a_session_per_conversation(store, channel):
    store.set_session(channel.id, "alice", "s-main", fresh=False, cwd="/w")
    thread = store.member(channel.id, "alice", "$root")
    assert (thread.session_id, thread.fresh, thread.last_seen, thread.conversation) == (None, False, None, "$root")
    store.set_session(channel.id, "alice", "s-thread", fresh=True, cwd="/w", conversation="$root")
    assert store.member(channel.id, "alice").session_id == "s-main"
    thread = store.member(channel.id, "alice", "$root")
    assert (thread.session_id, thread.fresh, thread.session_cwd) == ("s-thread", True, "/w")
    store.mark_seen(channel.id, "alice", "m9", "$root")
    thread = store.member(channel.id, "alice", "$root")
    assert (thread.last_seen, thread.fresh) == ("m9", False)
    assert store.member(channel.id, "alice").last_seen is None
    store.set_session(channel.id, "alice", "s-thread-2", fresh=True, conversation="$root")
    assert store.member(channel.id, "alice", "$root").session_id == "s-thread-2"
    assert store.member(channel.id, "carol", "$root") is None  # not a member
    # its thread sessions go with the membership
    store.remove_member(channel.id, "alice")
    store.add_member(channel.id, "alice")
    assert store.member(channel.id, "alice", "$root").session_id is None


def test_a_turn_in_a_thread_stores_its_message_and_answer_there(store, channel):
    store.add_message(channel.id, "@me:hs", "user", "root", ["$root"])
    message, (turn,) = store.turns.take(
        channel.id, "@me:hs", "in thread", "$t1", [("alice", "in thread", False)], RUN, conversation="$root"
    )
    assert message.conversation == "$root" and turn.conversation == "$root"
    store.set_session(channel.id, "alice", "s-thread", fresh=True, conversation="$root")
    store.turns.claim(turn.id, RUN)
    store.turns.answered(turn.id, channel.id, "alice", "the answer", ["$ans"], message.id)
    assert store.message_by_event("$ans").conversation == "$root"
    assert store.member(channel.id, "alice", "$root").last_seen == message.id
    assert store.member(channel.id, "alice").last_seen is None  # the main timeline's is its own
    assert store.last_agent_sender(channel.id) is None
    assert store.last_agent_sender(channel.id, "$root") == "alice"
    # an ended turn marks what was seen in its thread too
    message2, (turn2,) = store.turns.take(
        channel.id, "@me:hs", "again", "$t2", [("alice", "again", False)], RUN, conversation="$root"
    )
    store.turns.end(turn2.id, "ended", ["$x"], (channel.id, "alice", message2.id))
    assert store.member(channel.id, "alice", "$root").last_seen == message2.id
    assert store.member(channel.id, "alice").last_seen is None


def test_deleting_a_channel_deletes_its_thread_sessions(store, channel):
    store.set_session(channel.id, "alice", "s-thread", fresh=True, conversation="$root")
    store.delete_channel(channel.id)
    again = store.create_channel("!room2:hs", "general")
    store.add_member(again.id, "alice")
    assert store.core.models.ThreadSession.select().count() == 0


def test_a_channels_conversations_are_listed_last_written_first_with_their_first_words(store, channel):
    assert store.conversations(channel.id) == []
    store.add_message(channel.id, "@me:hs", "user", "root question", ["$root"])
    store.add_message(channel.id, "@me:hs", "user", "in the thread", ["$t1"], conversation="$root")
    store.add_message(channel.id, "alice", "agent", "thread answer", ["$t2"], conversation="$root")
    found = store.conversations(channel.id)
    assert [(c, first) for c, _, first in found] == [("$root", "in the thread"), ("", "root question")]
    assert found[0][1] >= found[1][1] > 0
    store.add_message(channel.id, "@me:hs", "user", "later in main", ["$m2"])
    assert store.conversations(channel.id)[0][0] == ""


def test_recent_texts_are_bounded_in_characters_each_and_in_all(store, channel, monkeypatch):
    """`history` reads through `recent_texts` (docs/sandbox.md "Limits"): each text cut by the
    database, pages read newest first until the total is reached, a thread's root first."""
    for i in range(12):
        store.add_message(channel.id, "alice", "agent", f"{i:02d}" + "x" * 5000, [f"$m{i}"])
    found = store.recent_texts(channel.id, "", 100, 10, 1000)
    assert [text for _, _, text in found] == [f"{i:02d}xxxxxxxx" for i in range(12)]  # each cut at 10
    assert all(sender == "alice" and created > 0 for created, sender, _ in found)
    # a total reached: no page more is read (pages of 4 here)
    from store import messages

    monkeypatch.setattr(messages, "TEXT_PAGE", 4)
    assert [t[:2] for _, _, t in store.recent_texts(channel.id, "", 100, 5000, 1)] == ["08", "09", "10", "11"]
    assert len(store.recent_texts(channel.id, "", 100, 5000, 5000 * 4 + 1)) == 8
    assert [t[:2] for _, _, t in store.recent_texts(channel.id, "", 3, 5000, 10**9)] == ["09", "10", "11"]
    store.add_message(channel.id, "@me:hs", "user", "in the thread", ["$t1"], conversation="$m0")
    assert [t[:5] for _, _, t in store.recent_texts(channel.id, "$m0", 10, 5000, 10**9)] == ["00xxx", "in th"]
