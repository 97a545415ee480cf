"""store.settings: each member's mode / model / option choices, usage, title and snapshot,
on SQLite, in memory and on a real PostgreSQL; and an older store gaining the table."""

import inspect

import pytest

from store import MemberSettings, StoreClosed
from store.settings import Settings


def test_defaults_and_non_members(store, channel):
    assert store.settings.get(channel.id, "alice") == MemberSettings(channel.id, "alice")
    assert store.settings.get(channel.id, "carol") is None
    store.settings.choose(channel.id, "carol", "mode", "plan")  # not a member: ignored
    store.settings.set_usage(channel.id, "carol", 1, 2)
    assert store.settings.get(channel.id, "carol") is None
    assert store.core.models.MemberSetting.select().count() == 0


def test_choices(store, channel):
    s = store.settings
    s.choose(channel.id, "alice", "mode", "plan")
    s.choose(channel.id, "alice", "model", "large")
    s.choose(channel.id, "alice", "config", "high", key="thought_level")
    s.choose(channel.id, "alice", "config", "x", key="other")
    s.choose(channel.id, "alice", "config", None, key="other")  # forgotten
    got = s.get(channel.id, "alice")
    assert (got.mode, got.model, got.config) == ("plan", "large", {"thought_level": "high"})
    assert got.choices == {"mode": "plan", "model": "large", "config": {"thought_level": "high"}}
    s.choose(channel.id, "alice", "mode", None)
    assert s.get(channel.id, "alice").mode is None
    s.set_choices(channel.id, "alice", {"mode": "code", "config": {"a": "1", "bad": 2}})
    got = s.get(channel.id, "alice")
    assert (got.mode, got.model, got.config) == ("code", None, {"a": "1"})
    assert s.get(channel.id, "bob") == MemberSettings(channel.id, "bob")  # per member
    with pytest.raises(ValueError, match="kind must be one of"):
        s.choose(channel.id, "alice", "colour", "red")
    with pytest.raises(ValueError, match="needs the option's key"):
        s.choose(channel.id, "alice", "config", "red")


def test_usage_title_snapshot_and_a_new_session(store, channel):
    s = store.settings
    s.choose(channel.id, "alice", "mode", "plan")
    s.set_usage(channel.id, "alice", 52000, 200000, 0.42, "USD")
    s.set_title(channel.id, "alice", "Refactor the greeter")
    s.set_snapshot(channel.id, "alice", {"modes": {"current": "plan", "choices": [{"id": "plan", "name": "Plan"}]}})
    got = s.get(channel.id, "alice")
    assert (got.used, got.size, got.cost, got.currency) == (52000, 200000, 0.42, "USD")
    assert got.title == "Refactor the greeter" and got.snapshot["modes"]["current"] == "plan"
    s.set_usage(channel.id, "alice", 10, 100)
    assert (s.get(channel.id, "alice").cost, s.get(channel.id, "alice").currency) == (None, None)
    s.new_session(channel.id, "alice")
    got = s.get(channel.id, "alice")
    assert got == MemberSettings(channel.id, "alice", mode="plan")  # only the choice stays


def test_of_channel_in_join_order(store, channel):
    store.settings.set_title(channel.id, "bob", "B")
    found = store.settings.of_channel(channel.id)
    assert [(m.agent, m.title) for m in found] == [("alice", None), ("bob", "B")]
    assert store.settings.of_channel("nope") == []


def test_settings_go_with_the_membership(store, channel):
    store.settings.choose(channel.id, "alice", "mode", "plan")
    store.settings.choose(channel.id, "bob", "mode", "code")
    store.remove_member(channel.id, "alice")
    store.add_member(channel.id, "alice")
    assert store.settings.get(channel.id, "alice").mode is None  # a new membership starts afresh
    assert store.settings.get(channel.id, "bob").mode == "code"
    store.delete_channel(channel.id)
    assert store.core.models.MemberSetting.select().count() == 0


def test_damaged_values_read_as_defaults(store, channel):
    store.settings.set_title(channel.id, "alice", "T")
    S = store.core.models.MemberSetting
    S.update(choices="{not json", snapshot="[1, 2]").execute()
    got = store.settings.get(channel.id, "alice")
    assert (got.mode, got.config, got.snapshot, got.title) == (None, {}, None, "T")


def test_settings_survive_reopening(open_durable):
    store = open_durable()
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    store.settings.choose(channel.id, "alice", "mode", "plan")
    store.settings.set_usage(channel.id, "alice", 1, 2, 0.5, "EUR")
    store.close()
    again = open_durable()
    got = again.settings.get(channel.id, "alice")
    assert (got.mode, got.used, got.size, got.cost, got.currency) == ("plan", 1, 2, 0.5, "EUR")


def test_an_older_store_gains_the_table(open_durable):
    # A store written before member settings existed: everything but sk_member_setting (and
    # what came after it: the turn records, the schema version).
    store = open_durable()
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    store.set_session(channel.id, "alice", "sess_1", fresh=False)
    store.add_message(channel.id, "me", "user", "hello", ["$e1"])
    for table in ("sk_member_setting", "sk_turn", "sk_schema"):
        store.core.db.execute_sql(f"DROP TABLE {table}")
    store.close()
    again = open_durable()
    member = again.member(channel.id, "alice")
    assert member.session_id == "sess_1" and [m.text for m in again.last_messages(channel.id, 5)] == ["hello"]
    assert again.settings.get(channel.id, "alice") == MemberSettings(channel.id, "alice")
    again.settings.choose(channel.id, "alice", "mode", "plan")
    assert again.settings.get(channel.id, "alice").mode == "plan"
    again.remove_member(channel.id, "alice")  # and the cascade holds in the migrated store
    assert again.core.models.MemberSetting.select().count() == 0


def test_every_settings_method_raises_store_closed_after_close(store, channel):
    calls = {
        "get": (channel.id, "alice"),
        "of_channel": (channel.id,),
        "choose": (channel.id, "alice", "mode", "plan"),
        "set_choices": (channel.id, "alice", {}),
        "set_usage": (channel.id, "alice", 1, 2),
        "set_title": (channel.id, "alice", "t"),
        "set_snapshot": (channel.id, "alice", {}),
        "new_session": (channel.id, "alice"),
    }
    public = {name for name, _ in inspect.getmembers(Settings, inspect.isfunction) if not name.startswith("_")}
    assert set(calls) == public, "a method is missing from this test"
    for name, args in calls.items():
        getattr(store.settings, name)(*args)  # all valid while open
    store.close()
    for name, args in calls.items():
        with pytest.raises(StoreClosed, match="^store is closed$"):
            getattr(store.settings, name)(*args)
