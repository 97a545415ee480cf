"""Opening, closing, locking and reopening a store."""

import inspect
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg2
import pytest

from store import Store, StoreClosed, StoreError, StoreLocked

REPO = Path(__file__).resolve().parents[3]

# A second bridge in another process: opens the store, says so, then holds it
# until stdin closes (or it is killed).
CHILD = """
import sys
from store import Store, StoreLocked
database, folder, hold = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "hold"
try:
    store = Store.open(database, folder)
except StoreLocked as exc:
    print("locked:", exc, flush=True)
    sys.exit(3)
print("ready", flush=True)
if hold:
    sys.stdin.read()
store.close()
"""


def child(backend, hold: bool) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, "-c", CHILD, backend.database, str(backend.folder or ""), "hold" if hold else "try"]
    return subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def open_eventually(open_store, seconds=60.0) -> Store:
    # The kernel drops a dead process's flock at once, but the PostgreSQL
    # server needs a moment to notice a killed client's connection is gone.
    deadline = time.monotonic() + seconds
    while True:
        try:
            return open_store()
        except StoreLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def exercise_every_method(store: Store, channel_id: str) -> dict:
    """One valid call per public method; returns them to replay after close."""
    calls = {
        "txn_seen": ("t1",),
        "available": (),
        "retry_in": (),
        "prune_txns": (),
        "mark_txn": ("t1",),
        "create_channel": ("!another:hs", "another"),
        "channel_by_room": ("!room:hs",),
        "channel": (channel_id,),
        "channels": (),
        "rename_channel": (channel_id, "renamed"),
        "add_member": (channel_id, "alice"),
        "member": (channel_id, "alice"),
        "members": (channel_id,),
        "set_session": (channel_id, "alice", "s1", True),
        "set_fresh": (channel_id, "alice", False),
        "set_last_seen": (channel_id, "alice", "m1"),
        "mark_seen": (channel_id, "alice", "m1"),
        "members_of_agent": ("alice",),
        "add_message": (channel_id, "alice", "agent", "hi", ["$e"]),
        "add_event": (channel_id, "m1", "$e2"),
        "messages_after": (channel_id, None, 5),
        "messages_in": (channel_id, "$root", None, 5),
        "last_messages": (channel_id, 5),
        "conversations": (channel_id,),
        "lead_up": (channel_id, "$e", 5),
        "recent_texts": (channel_id, "", 5, 100, 1000),
        "message_by_event": ("$e",),
        "delete_message_by_event": ("$none",),
        "last_agent_sender": (channel_id,),
        "count_messages": (channel_id,),
        "set_agent_commands": ("alice", [{"name": "plan"}]),
        "agent_commands": ("alice",),
        "set_value": ("k", "v"),
        "get_value": ("k",),
        "delete_value": ("k",),
        "together": (lambda: None,),
        "move_channel": (channel_id, "!moved:hs"),
        "remove_member": (channel_id, "alice"),
        "delete_channel": (channel_id,),
    }
    for name, args in calls.items():
        getattr(store, name)(*args)
    return calls


def test_every_method_raises_store_closed_after_close(store):
    channel = store.create_channel("!room:hs", "general")
    calls = exercise_every_method(store, channel.id)  # all valid while open
    public = {name for name, _ in inspect.getmembers(Store, inspect.isfunction) if not name.startswith("_")}
    assert set(calls) == public - {"open", "close"}, "a method is missing from this test"
    store.close()
    for name, args in calls.items():
        with pytest.raises(StoreClosed, match="^store is closed$"):
            getattr(store, name)(*args)


def test_close_is_idempotent_and_store_closed_is_a_store_error(store):
    store.close()
    store.close()
    with pytest.raises(StoreError):
        store.channels()


def test_context_manager_closes(open_store):
    with open_store() as store:
        store.set_value("k", "v")
    with pytest.raises(StoreClosed):
        store.get_value("k")


def test_in_memory_flag(backend, store):
    assert store.in_memory is (backend.name == "memory")


def test_in_memory_stores_are_independent_and_unlocked():
    one, two = Store.open(":memory:"), Store.open(":memory:")
    try:
        one.create_channel("!room:hs", "general")
        assert [c.name for c in one.channels()] == ["general"]
        assert two.channels() == []
    finally:
        one.close()
        two.close()


def test_in_memory_store_forgets_on_close():
    store = Store.open(":memory:")
    store.set_value("k", "v")
    store.close()
    with Store.open(":memory:") as again:
        assert again.get_value("k") is None


def test_a_second_store_on_the_same_database_is_locked(open_durable):
    first = open_durable()
    with pytest.raises(StoreLocked, match="another running bridge"):
        open_durable()
    first.set_value("k", "still works")
    assert first.get_value("k") == "still works"


def test_the_lock_is_released_on_close(open_durable):
    open_durable().close()
    second = open_durable()
    second.set_value("k", "v")
    second.close()
    assert open_durable().get_value("k") == "v"


def test_reopening_keeps_everything(open_durable):
    store = open_durable()
    channel = store.create_channel("!room:hs", "general")
    direct = store.create_channel("!dm:hs", "", direct_agent="bob")
    store.add_member(channel.id, "alice")
    store.add_member(channel.id, "bob")
    store.add_member(direct.id, "bob")
    question = store.add_message(channel.id, "me", "user", "@alice hi", ["$q"])
    answer = store.add_message(channel.id, "alice", "agent", "hello", ["$a1", "$a2"])
    store.set_session(channel.id, "alice", "session-1", True)
    store.set_last_seen(channel.id, "alice", answer.id)
    store.mark_txn("txn-1")
    store.set_agent_commands("alice", [{"name": "plan", "description": "Plan"}])
    store.set_value("space", "!space:hs")
    snapshot = (
        store.channels(),
        store.members(channel.id),
        store.members(direct.id),
        store.last_messages(channel.id, 10),
    )
    store.close()

    again = open_durable()
    assert (
        again.channels(),
        again.members(channel.id),
        again.members(direct.id),
        again.last_messages(channel.id, 10),
    ) == snapshot
    assert snapshot[3] == [question, answer]
    assert again.message_by_event("$a2") == answer
    assert again.last_agent_sender(channel.id) == "alice"
    assert again.txn_seen("txn-1") and not again.txn_seen("txn-2")
    assert again.agent_commands("alice") == [{"name": "plan", "description": "Plan"}]
    assert again.get_value("space") == "!space:hs"
    # New ids still sort after the old ones.
    later = again.add_message(channel.id, "me", "user", "later")
    assert again.messages_after(channel.id, answer.id, 10) == [later]


def test_locked_by_another_process_until_it_dies(durable_backend, open_durable):
    holder = child(durable_backend, hold=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLocked):
            open_durable()
        holder.kill()  # a crashed bridge must not leave its lock behind
        holder.wait(10)
        store = open_eventually(open_durable)
        store.set_value("k", "v")
        assert store.get_value("k") == "v"
    finally:
        holder.kill()
        holder.wait(10)


def test_another_process_is_locked_out_while_we_hold_it(durable_backend, open_durable):
    store = open_durable()
    attempt = child(durable_backend, hold=False)
    out, _ = attempt.communicate(timeout=60)
    assert attempt.returncode == 3 and out.startswith("locked:"), out
    store.close()
    attempt = child(durable_backend, hold=False)
    out, _ = attempt.communicate(timeout=60)
    assert attempt.returncode == 0 and out.strip() == "ready", out


def test_threads_share_one_store(store):
    channel = store.create_channel("!room:hs", "general")
    errors = []

    def write(name):
        try:
            for i in range(25):
                store.add_message(channel.id, name, "agent", f"{name} {i}", [f"${name}-{i}"])
                store.last_messages(channel.id, 3)
        except Exception as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f"agent{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    messages = store.last_messages(channel.id, 1000)
    assert len(messages) == 100 == store.count_messages(channel.id)
    assert [m.id for m in messages] == sorted({m.id for m in messages})
    for n in range(4):  # each thread's messages in the order it wrote them
        assert [m.text for m in messages if m.sender == f"agent{n}"] == [f"agent{n} {i}" for i in range(25)]


def test_sqlite_files_wal_and_lock(tmp_path):
    folder = tmp_path / "nested" / "data"
    with Store.open("sqlite", folder) as store:
        store.set_value("k", "v")
        assert (folder / "sidekicks.db").exists()
        assert (folder / "sidekicks.lock").exists()
        assert (folder / "sidekicks.db-wal").exists()  # WAL journal mode is on


def test_a_failed_open_releases_the_lock(tmp_path):
    (tmp_path / "sidekicks.db").write_bytes(b"this is not a database" * 100)
    for _ in range(2):  # the second time is not StoreLocked
        with pytest.raises(StoreError) as raised:
            Store.open("sqlite", tmp_path)
        assert not isinstance(raised.value, StoreLocked)


def test_failing_to_create_the_tables_releases_the_lock(durable_backend, open_durable):
    # Something else under a table's name: a view cannot be indexed.
    bad = "CREATE VIEW sk_message_event AS SELECT 1 AS one"
    if durable_backend.name == "sqlite":
        durable_backend.folder.mkdir(parents=True)
        with sqlite3.connect(durable_backend.folder / "sidekicks.db") as conn:
            conn.execute(bad)
    else:
        with psycopg2.connect(durable_backend.database) as conn, conn.cursor() as cursor:
            cursor.execute(bad)
        conn.close()
    for _ in range(2):  # the second time is not StoreLocked
        with pytest.raises(StoreError, match="cannot create the tables") as raised:
            open_durable()
        assert not isinstance(raised.value, StoreLocked)


def test_bad_database_arguments(tmp_path):
    with pytest.raises(ValueError, match="folder"):
        Store.open("sqlite")
    with pytest.raises(ValueError, match="unknown database"):
        Store.open("mysql://x", tmp_path)


def test_unreachable_postgresql_is_a_store_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(StoreError, match="cannot connect to PostgreSQL") as raised:
            Store.open(f"postgres://nobody:secret@127.0.0.1:{port}/none")
    assert "secret" not in str(raised.value)
