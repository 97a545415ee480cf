"""Versioned migrations (store/migrations.py): a store of every earlier version, with its data,
opens at the current version with nothing lost — on SQLite and on PostgreSQL."""

import json

import pytest

from store import Store, StoreError
from store import schema
from store.connect import connect
from store.migrations import LATEST, ROUTE, version

BASE = ["Channel", "Member", "Message", "MessageEvent", "Txn", "AgentCommand", "Value"]
ADDED = {2: ["Pending"], 3: ["MemberSetting"], 5: ["Turn", "Schema"], 7: ["Schedule"]}  # 4 and 6 add a column


def make_store_of_version(backend, v: int, legacy_pending: bool = False) -> None:
    """The tables a store of version `v` had, with some history in them."""
    db, lock = connect(backend.database, backend.folder)
    try:
        m = schema.build(db)
        names = BASE + [name for since, added in ADDED.items() if since <= v for name in added]
        with db.atomic():
            db.create_tables([getattr(m, name) for name in names], safe=False)
            if v < 4:
                db.execute_sql("DROP INDEX IF EXISTS sk_txn_seen")
                db.execute_sql("ALTER TABLE sk_txn DROP COLUMN seen")
            if v < 6:
                db.execute_sql("ALTER TABLE sk_member DROP COLUMN session_cwd")
            m.Channel.insert(id="c1", room_id="!r:hs", name="general", created=1).execute()
            m.Member.insert(channel_id="c1", agent="alice", session_id="s1", joined="j1").execute()
            m.Message.insert(channel_id="c1", id="m1", sender="@me:hs", role="user", text="hello",
                             event_ids='["$e1"]', created=1).execute()
            m.MessageEvent.insert(event_id="$e1", channel_id="c1", message_id="m1").execute()
            db.execute_sql("INSERT INTO sk_txn (id) VALUES ('txn-1')")
            m.Value.insert(key="k", value="v").execute()
            if legacy_pending and v == 1:  # version 1 kept work in progress as JSON values
                m.Value.insert(key="prompts/pending", value=json.dumps({"$e1": {"room": "!r:hs", "done": []}})).execute()
            if legacy_pending and v >= 2:
                m.Pending.insert(kind="prompt", key="$e1", data=json.dumps({"room": "!r:hs", "done": []})).execute()
                m.Pending.insert(kind="answer", key="$a1", data=json.dumps(
                    {"room": "!r:hs", "agent": "alice", "prompt": "$e1", "txn": "x", "sent": True})).execute()
            if v >= 5:
                m.Schema.insert(version=v).execute()
    finally:
        db.close()
        if lock is not None:
            lock.release()


@pytest.mark.parametrize("v", range(1, LATEST + 1))
def test_every_earlier_version_opens_at_the_current_one_with_its_history(open_durable, durable_backend, v):
    make_store_of_version(durable_backend, v)
    store = open_durable()
    assert version(store._db, store._m) == LATEST
    assert [c.room_id for c in store.channels()] == ["!r:hs"]
    assert store.member("c1", "alice").session_id == "s1"
    assert store.member("c1", "alice").session_cwd is None  # opened before cwds were kept: used as before
    assert store.message_by_event("$e1").text == "hello"
    assert store.get_value("k") == "v"
    assert store.txn_seen("txn-1")
    # what the later versions added works
    store.mark_txn("txn-2")
    store.settings.choose("c1", "alice", "mode", "plan")
    assert store.settings.get("c1", "alice").mode == "plan"
    taken = store.turns.take("c1", "@me:hs", "again", "$e2", [("alice", "again", False)], "run")
    assert taken is not None and store.turns.claim(taken[1][0].id, "run") is not None
    made = store.schedules.add("c1", "", "alice", "look again", due=5, cron=None, most=10)
    assert [s.number for s in store.schedules.listed("c1")] == [made.number]


@pytest.mark.parametrize("v", [1, 2, 4])
def test_work_in_progress_of_an_older_store_becomes_turn_records(open_durable, durable_backend, v):
    make_store_of_version(durable_backend, v, legacy_pending=True)
    store = open_durable()
    turns = store.turns.unfinished()
    route = [t for t in turns if t.agent == ROUTE]
    assert len(route) == 1 and route[0].prompt_event == "$e1" and route[0].message_id == "m1"
    if v >= 2:  # alice's answer had begun: it is interrupted at the next start, not begun again
        assert [(t.agent, t.state, t.answer) for t in turns if t.agent != ROUTE] == [("alice", "prompted", ("$a1",))]
        assert json.loads(route[0].text) == ["alice"]
    assert store._db.execute_sql("SELECT count(*) FROM sk_pending").fetchone()[0] == 0  # carried over
    assert store.get_value("prompts/pending") is None


def test_a_new_store_starts_at_the_current_version(open_durable):
    store = open_durable()
    assert version(store._db, store._m) == LATEST


def test_a_store_of_a_newer_version_is_refused_with_a_clear_message(open_durable, durable_backend):
    make_store_of_version(durable_backend, LATEST)
    db, lock = connect(durable_backend.database, durable_backend.folder)
    db.execute_sql("UPDATE sk_schema SET version = %d" % (LATEST + 1))
    db.close()
    if lock is not None:
        lock.release()
    with pytest.raises(StoreError, match="newer than this bridge"):
        Store.open(durable_backend.database, durable_backend.folder)
