"""Pending items: work in progress written down so that a crash cannot lose it."""

import pytest


def test_items_are_written_read_and_crossed_out(store):
    store.update_pending("prompt", put={"$a": {"room": "!r:hs", "done": []}, "$b": {"room": "!s:hs"}})
    assert store.pending("prompt") == {"$a": {"room": "!r:hs", "done": []}, "$b": {"room": "!s:hs"}}
    assert store.pending_item("prompt", "$a") == {"room": "!r:hs", "done": []}
    store.update_pending("prompt", drop=["$a", "$never-written"])
    assert store.pending("prompt") == {"$b": {"room": "!s:hs"}}
    assert store.pending_item("prompt", "$a") is None


def test_writing_an_item_again_replaces_it(store):
    store.update_pending("prompt", put={"$a": {"done": []}})
    store.update_pending("prompt", put={"$a": {"done": ["alice"]}})
    assert store.pending("prompt") == {"$a": {"done": ["alice"]}}


def test_kinds_are_separate(store):
    store.update_pending("answer", put={"$a": {"agent": "alice"}})
    store.update_pending("prompt", put={"$a": {"room": "!r:hs"}})
    store.update_pending("answer", drop=["$a"])
    assert store.pending("answer") == {}
    assert store.pending("prompt") == {"$a": {"room": "!r:hs"}}


def test_put_and_drop_in_one_call(store):
    store.update_pending("answer", put={"txn:1": {"agent": "alice"}})
    store.update_pending("answer", put={"$event": {"agent": "alice"}}, drop=["txn:1"])
    assert store.pending("answer") == {"$event": {"agent": "alice"}}


def test_a_failed_update_changes_nothing(store):
    store.update_pending("answer", put={"txn:1": {"agent": "alice"}})
    with pytest.raises(TypeError):  # not JSON: the drop before it is rolled back too
        store.update_pending("answer", put={"$bad": {"x": object()}}, drop=["txn:1"])
    assert store.pending("answer") == {"txn:1": {"agent": "alice"}}


def test_items_survive_reopening(open_durable):
    first = open_durable()
    first.update_pending("prompt", put={"$a": {"room": "!r:hs", "done": ["bob"]}})
    first.close()
    again = open_durable()
    assert again.pending("prompt") == {"$a": {"room": "!r:hs", "done": ["bob"]}}


def test_a_value_can_be_deleted(store):
    store.set_value("k", "v")
    store.delete_value("k")
    store.delete_value("never-set")
    assert store.get_value("k") is None


def test_mark_seen_sets_last_seen_and_ends_freshness(store):
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    store.set_session(channel.id, "alice", "s1", fresh=True)
    store.mark_seen(channel.id, "alice", "m7")
    member = store.member(channel.id, "alice")
    assert (member.last_seen, member.fresh, member.session_id) == ("m7", False, "s1")
