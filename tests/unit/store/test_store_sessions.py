"""The bridge's record of sessions (store/sessions.py): per member and conversation, a title
(the agent's over the first prompt's line) and the last use; gone with the thread, the member,
the channel."""

from store.gone import GONE


def ids(records):
    return [r.session_id for r in records]


def test_sessions_are_listed_per_member_and_conversation_last_used_first(store, channel):
    store.sessions.used(channel.id, "alice", "", "s1", first_line="first question")
    store.sessions.used(channel.id, "alice", "", "s2", first_line="second")
    store.sessions.used(channel.id, "alice", "$root", "t1", first_line="in a thread")
    store.sessions.used(channel.id, "bob", "", "b1")
    assert ids(store.sessions.listed(channel.id, "alice", "")) in (["s2", "s1"], ["s1", "s2"])
    store.sessions.used(channel.id, "alice", "", "s1")  # used again: first now, title kept
    listed = store.sessions.listed(channel.id, "alice", "")
    assert ids(listed) == ["s1", "s2"] and listed[0].title == "first question"
    assert listed[0].used >= listed[1].used
    assert ids(store.sessions.listed(channel.id, "alice", "$root")) == ["t1"]
    assert ids(store.sessions.listed(channel.id, "bob", "")) == ["b1"]
    assert store.sessions.listed(channel.id, "bob", "")[0].title is None
    assert sorted((r.conversation, r.session_id) for r in store.sessions.of_agent("alice")) == [
        ("", "s1"),
        ("", "s2"),
        ("$root", "t1"),
    ]


def test_the_agents_title_wins_over_the_first_line(store, channel):
    store.sessions.used(channel.id, "alice", "", "s1", first_line="hello there")
    store.sessions.used(channel.id, "alice", "", "s1", title="Planning the trip", first_line="later")
    assert store.sessions.listed(channel.id, "alice", "")[0].title == "Planning the trip"
    store.sessions.used(channel.id, "alice", "", "s1", first_line="another line")
    assert store.sessions.listed(channel.id, "alice", "")[0].title == "Planning the trip"


def test_a_forgotten_thread_takes_its_sessions_and_the_members_sessions_there(store, channel):
    store.sessions.used(channel.id, "alice", "$root", "t1")
    store.set_session(channel.id, "bob", "t2", fresh=True, conversation="$root")  # never recorded
    store.sessions.used(channel.id, "alice", "", "s1")
    gone = store.sessions.forget(channel.id, "$root")
    assert sorted((r.agent, r.session_id) for r in gone) == [("alice", "t1"), ("bob", "t2")]
    assert store.sessions.of_channel(channel.id, "$root") == []
    assert store.member(channel.id, "bob", "$root").session_id is None
    assert ids(store.sessions.of_channel(channel.id)) == ["s1"]


def test_sessions_go_with_the_member_and_the_channel(store, channel):
    store.sessions.used(channel.id, "alice", "", "s1")
    store.sessions.used(channel.id, "bob", "", "b1")
    store.remove_member(channel.id, "alice")
    assert [(r.agent, r.session_id) for r in store.sessions.of_channel(channel.id)] == [("bob", "b1")]
    assert store.sessions.listed(channel.id, "alice", "") == []
    store.delete_channel(channel.id)
    assert store.sessions.of_channel(channel.id) == []


def test_a_removed_members_sessions_stay_that_channels(store, channel):
    """Kicked, its sessions (recorded or only current, in a thread too) are still known as this
    channel's — GONE, in no conversation — so no other room lists them as another client's."""
    store.add_member(channel.id, "alice")
    store.sessions.used(channel.id, "alice", "", "s1")
    store.set_session(channel.id, "alice", "s2", fresh=True)  # current, never recorded
    store.set_session(channel.id, "alice", "t1", fresh=True, conversation="$root")
    store.remove_member(channel.id, "alice")
    assert store.member(channel.id, "alice") is None
    assert sorted((r.channel_id, r.conversation, r.session_id) for r in store.sessions.of_agent("alice")) == [
        (channel.id, GONE, "s1"),
        (channel.id, GONE, "s2"),
        (channel.id, GONE, "t1"),
    ]
    assert store.sessions.of_channel(channel.id) == [] and store.sessions.listed(channel.id, "alice", "") == []
    store.add_member(channel.id, "alice")  # added again: those are not its sessions here
    assert store.sessions.listed(channel.id, "alice", "") == []
