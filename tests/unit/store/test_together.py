"""Store.together: several store calls as one operation in one transaction (the attached
client's prompt is written down and taken so: bridge/attach/service.py)."""

import pytest


def test_calls_made_together_are_all_written(store, channel):
    def both():
        store.set_value("pending", "{}")
        return store.turns.take(channel.id, "@owner:hs", "hi", "$e1", [("alice", "hi", False)], "run1")

    message, turns = store.together(both)
    assert store.get_value("pending") == "{}"
    assert store.message_by_event("$e1").id == message.id
    assert [t.agent for t in turns] == ["alice"]
    assert store.turns.get(turns[0].id) is not None


def test_a_failure_inside_writes_none_of_them(store, channel):
    def half():
        store.set_value("pending", "{}")
        store.turns.take(channel.id, "@owner:hs", "hi", "$e1", [("alice", "hi", False)], "run1")
        raise RuntimeError("after the writes")

    with pytest.raises(RuntimeError):
        store.together(half)
    assert store.get_value("pending") is None
    assert store.message_by_event("$e1") is None
