"""Versioned migrations (store/migrations.py): a store of every earlier version, with its data,
opens at the current version with nothing lost — on SQLite and on PostgreSQL."""

import json

import pytest

from store import Store, StoreError, keys, schema
from store.connect import connect
from store.ids import new_id
from store.locks import PgAdvisoryLock
from store.migrations import LATEST, ROUTE, version

BASE = ["Channel", "Member", "Message", "MessageEvent", "Txn", "AgentCommand", "Value"]
ADDED = {
    2: ["Pending"],
    3: ["MemberSetting"],
    5: ["Turn", "Schema"],
    7: ["Schedule"],
    8: ["E2eePending", "E2eeRoom"],
    9: ["ThreadSession"],
    10: ["Session"],
    11: ["WorkDir", "Worktree"],
    13: ["Spend", "SessionCost"],
}  # 4, 6, 9 and 12 add a column

# what the bridge's encryption kept: before version 8, two JSON lists in the key-value table
WAITING = [
    {
        "event_id": f"$x{n}",
        "type": "m.room.encrypted",
        "room_id": "!r:hs",
        "sender": "@me:hs",
        "content": {
            "algorithm": "m.megolm.v1.aes-sha2",
            "session_id": f"S{n % 2}",
            "sender_key": "K",
            "ciphertext": "…",
            "device_id": "D",
        },
    }
    for n in range(3)
]
ENCRYPTED = ["!r:hs", "!dm:hs"]
LIVE_TURN_INDEX = "sk_turn_channel_id_conversation_state"  # step 14


def closed(db, lock) -> None:
    """As the store closes (store/core.py): PostgreSQL's advisory lock released while still
    connected — a closed connection's lock goes only once the server's backend has ended, which
    on a loaded machine can be after the next Store.open — and a file lock once closed."""
    if isinstance(lock, PgAdvisoryLock):
        lock.release()
    db.close()
    if lock is not None and not isinstance(lock, PgAdvisoryLock):
        lock.release()


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
            if 5 <= v < 14:
                db.execute_sql(f"DROP INDEX IF EXISTS {LIVE_TURN_INDEX}")
            m.Channel.insert(id="c1", room_id="!r:hs", name="general", created=1).execute()
            m.Member.insert(channel_id="c1", agent="alice", session_id="s1", joined="j1").execute()
            if v >= 10:  # the session's record, as that version wrote it
                m.Session.insert(
                    channel_id="c1", agent="alice", conversation="", session_id="s1", created=1, used=1
                ).execute()
            m.Message.insert(
                channel_id="c1", id="m1", sender="@me:hs", role="user", text="hello", event_ids='["$e1"]', created=1
            ).execute()
            m.MessageEvent.insert(event_id="$e1", channel_id="c1", message_id="m1").execute()
            db.execute_sql("INSERT INTO sk_txn (id) VALUES ('txn-1')")
            m.Value.insert(key="k", value="v").execute()
            if v < 8:
                m.Value.insert(key=keys.E2EE_PENDING, value=json.dumps(WAITING)).execute()
                m.Value.insert(key=keys.E2EE_ROOMS, value=json.dumps(ENCRYPTED)).execute()
            else:
                for _n, event in enumerate(WAITING):
                    m.E2eePending.insert(
                        id=new_id(),
                        event_id=event["event_id"],
                        room_id=event["room_id"],
                        session_id=event["content"]["session_id"],
                        event=json.dumps(event),
                        received=1,
                    ).execute()
                for room_id in ENCRYPTED:
                    m.E2eeRoom.insert(room_id=room_id, marked=1).execute()
            if legacy_pending and v == 1:  # version 1 kept work in progress as JSON values
                m.Value.insert(
                    key="prompts/pending", value=json.dumps({"$e1": {"room": "!r:hs", "done": []}})
                ).execute()
            if legacy_pending and v >= 2:
                m.Pending.insert(kind="prompt", key="$e1", data=json.dumps({"room": "!r:hs", "done": []})).execute()
                m.Pending.insert(
                    kind="answer",
                    key="$a1",
                    data=json.dumps({"room": "!r:hs", "agent": "alice", "prompt": "$e1", "txn": "x", "sent": True}),
                ).execute()
            if v >= 5:
                m.Schema.insert(version=v).execute()
            if 7 <= v < 12:  # what an agent scheduled, before the owner approved repeating ones
                for number, prompt, cron in ((1, "every minute", "* * * * *"), (2, "once", None)):
                    m.Schedule.insert(
                        id=f"s{number}",
                        channel_id="c1",
                        conversation="",
                        number=number,
                        agent="alice",
                        prompt=prompt,
                        cron=cron,
                        due=5,
                        state="active",
                        created=1,
                    ).execute()
                db.execute_sql("ALTER TABLE sk_schedule DROP COLUMN approved")
            if v < 9:  # after the history is in: the model writes the column
                db.execute_sql("DROP INDEX IF EXISTS sk_message_channel_id_conversation_id")
                db.execute_sql("ALTER TABLE sk_message DROP COLUMN conversation")
    finally:
        closed(db, lock)


@pytest.mark.parametrize("v", range(1, LATEST + 1))
def test_every_earlier_version_opens_at_the_current_one_with_its_history(open_durable, durable_backend, v):
    make_store_of_version(durable_backend, v)
    store = open_durable()
    assert version(store.core.db, store.core.models) == LATEST
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
    assert [s.number for s in store.schedules.listed("c1")][-1] == made.number
    # the encryption's events waiting for a key and its encrypted rooms, in their tables
    assert store.e2ee.waiting() == WAITING
    assert store.e2ee.waiting("!r:hs", "S1") == [WAITING[1]]
    assert store.e2ee.encrypted_rooms() == sorted(ENCRYPTED)
    assert store.get_value(keys.E2EE_PENDING) is None and store.get_value(keys.E2EE_ROOMS) is None
    store.e2ee.wait("$x3", "!r:hs", "S1", {"event_id": "$x3"})
    assert store.e2ee.done("$x0") and [e["event_id"] for e in store.e2ee.waiting()] == ["$x1", "$x2", "$x3"]
    # conversations: the older messages are the main timeline's; a thread and its sessions work
    assert sorted(m.text for m in store.messages_in("c1", "", None, 10)) == ["again", "hello"]  # ids: "m1" sorts last
    store.add_message("c1", "alice", "agent", "in the thread", ["$t1"], conversation="$e1")
    assert [m.text for m in store.messages_in("c1", "$e1", None, 10)] == ["hello", "in the thread"]
    assert sorted(m.text for m in store.messages_in("c1", "", None, 10)) == ["again", "hello"]
    assert store.last_agent_sender("c1", "$e1") == "alice"
    store.set_session("c1", "alice", "s-thread", fresh=True, conversation="$e1")
    assert store.member("c1", "alice", "$e1").session_id == "s-thread"
    assert store.member("c1", "alice").session_id == "s1"
    # the record of sessions (step 10): the member's session as of the migration, then more
    recorded = store.sessions.listed("c1", "alice", "")
    assert [(r.session_id, r.title) for r in recorded] == [("s1", None)]
    store.sessions.used("c1", "alice", "", "s2", first_line="a new one")
    assert [r.session_id for r in store.sessions.listed("c1", "alice", "")][0] == "s2"
    # where agents work (step 11): a `!cwd` folder, a thread's worktree
    store.places.set_work_dir("c1", "alice", "/code")
    assert store.places.work_dir("c1", "alice") == "/code"
    made = store.places.add_worktree("c1", "$e1", "/repo", "sidekicks/x-1", "/repo.worktrees/x-1")
    assert store.places.worktree("c1", "$e1", "/repo") == made and made.number == 1
    # a conversation's live turns by their own index (step 14)
    assert LIVE_TURN_INDEX in {index.name for index in store.core.db.get_indexes("sk_turn")}
    assert store.turns.last_live_agent("c1") == "alice"


def test_the_last_speaker_query_reads_only_the_live_turns_of_the_conversation(tmp_path):
    store = Store.open("sqlite", tmp_path)
    hot = store.core.queries.last_live_agent
    params = hot.params(channel_id="c1", conversation="")
    plan = " ".join(row[-1] for row in store.core.db.execute_sql("EXPLAIN QUERY PLAN " + hot.sql, params).fetchall())
    assert f"USING INDEX {LIVE_TURN_INDEX} (channel_id=? AND conversation=? AND state=?)" in plan, plan
    store.close()


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
    assert store.core.db.execute_sql("SELECT count(*) FROM sk_pending").fetchone()[0] == 0  # carried over
    assert store.get_value("prompts/pending") is None


@pytest.mark.parametrize(
    "pending, rooms",
    [
        ("{not json", '[1, null, "!r:hs"]'),
        ('{"$x": {}}', '"!r:hs"'),
        ('[{"event_id": "$x"}, 3, {"event_id": "$y", "room_id": "!r:hs"}]', ""),
    ],
)
def test_what_an_older_store_kept_for_encryption_is_carried_over_as_far_as_it_reads(
    open_durable, durable_backend, pending, rooms
):
    """The bridge read an unreadable value as empty, and used only the events with an event id
    and a room: so does the step that carries them over; the values go either way."""
    make_store_of_version(durable_backend, 7)
    db, lock = connect(durable_backend.database, durable_backend.folder)
    try:
        m = schema.build(db)
        m.Value.update(value=pending).where(m.Value.key == keys.E2EE_PENDING).execute()
        m.Value.update(value=rooms).where(m.Value.key == keys.E2EE_ROOMS).execute()
    finally:
        closed(db, lock)
    store = open_durable()
    waiting = store.e2ee.waiting()
    assert waiting == ([{"event_id": "$y", "room_id": "!r:hs"}] if pending.startswith("[") else [])
    assert store.e2ee.waiting("!r:hs", "") == waiting  # no session id: waits under none
    assert store.e2ee.encrypted_rooms() == (["!r:hs"] if rooms.startswith("[") else [])
    assert store.get_value(keys.E2EE_PENDING) is None and store.get_value(keys.E2EE_ROOMS) is None


@pytest.mark.parametrize("v", [7, 11])
def test_an_older_stores_repeating_schedules_wait_for_the_owners_approval(open_durable, durable_backend, v):
    """Before version 12 an agent's cron ran unasked: it waits for the owner now; a single run
    stays as it was."""
    make_store_of_version(durable_backend, v)
    store = open_durable()
    assert [(s.prompt, s.state, s.approved) for s in store.schedules.listed("c1")] == [
        ("every minute", "waiting", None),
        ("once", "active", None),
    ]
    assert [s.prompt for s in store.schedules.due(10)] == ["once"]
    assert [s.prompt for s in store.schedules.waiting()] == ["every minute"]


def test_a_new_store_starts_at_the_current_version(open_durable):
    store = open_durable()
    assert version(store.core.db, store.core.models) == LATEST


def test_a_store_of_a_newer_version_is_refused_with_a_clear_message(open_durable, durable_backend):
    make_store_of_version(durable_backend, LATEST)
    db, lock = connect(durable_backend.database, durable_backend.folder)
    db.execute_sql(f"UPDATE sk_schema SET version = {LATEST + 1}")
    closed(db, lock)
    with pytest.raises(StoreError, match="newer than this bridge"):
        Store.open(durable_backend.database, durable_backend.folder)
