"""The store when its database goes away: PostgreSQL restarted or stopped under a
running store, another bridge taking the database meanwhile, a SQLite file that cannot be
written. A real PostgreSQL cluster of this module's own (restarted by the tests) and real
SQLite files.
"""

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psycopg2
import pytest

from store import Store, StoreLocked, StoreLockLost, StoreUnavailable, StoreUnwritable
from store.locks import PG_LOCK_KEY

REPO = Path(__file__).resolve().parents[3]
pg = pytest.mark.postgres


@pytest.fixture
def pg_store(restartable_postgres, drop_tables):
    drop_tables(restartable_postgres.url)
    opened = []

    def open_store() -> Store:
        store = Store.open(restartable_postgres.url)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()
    if not (restartable_postgres.cluster.data / "postmaster.pid").exists():
        restartable_postgres.cluster.start_again()  # a test that stopped it and failed


def _admin(url: str):
    conn = psycopg2.connect(url)
    conn.autocommit = True
    return conn


def _backend_of(store: Store, url: str) -> int:
    name = store.core.db.connect_params["application_name"]
    with _admin(url) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))
        [(pid,)] = cursor.fetchall()
    return pid


# ---- PostgreSQL -------------------------------------------------------------------------------


@pg
def test_a_restart_between_two_calls_is_invisible(restartable_postgres, pg_store):
    store = pg_store()
    channel = store.create_channel("!room:hs", "general")
    store.add_message(channel.id, "@me:hs", "user", "before", ["$before"])
    restartable_postgres.cluster.restart()  # pg_ctl restart -m fast: the connection is ended
    # the call finds the connection gone, gets it back at once, takes the lock again, is done
    store.add_message(channel.id, "@me:hs", "user", "after", ["$after"])
    assert [m.text for m in store.last_messages(channel.id, 10)] == ["before", "after"]
    assert store.reconnects == 1
    with pytest.raises(StoreLocked):  # the lock is held again: no second bridge
        Store.open(restartable_postgres.url)


@pg
def test_restarts_under_a_stream_of_writes_lose_nothing_and_write_nothing_twice(restartable_postgres, pg_store):
    store = pg_store()
    channel = store.create_channel("!room:hs", "general")
    done, refused, restarts = [], [], 3
    restarting = threading.Thread(target=lambda: [restartable_postgres.cluster.restart() for _ in range(restarts)])
    restarting.start()
    n = 0
    while restarting.is_alive() or n < 20 or len(done) < 20:
        n += 1
        event_id = f"$m{n}"
        try:
            # a message and its turn, one transaction (the first try may have landed: not twice)
            store.turns.take(channel.id, "@me:hs", f"message {n}", event_id, [("alice", f"message {n}", False)], "run")
            store.mark_txn(f"txn-{n}")
            done.append(n)
        except StoreUnavailable as exc:  # the server is down for a moment: nothing of it written
            assert "\n" not in str(exc)
            refused.append(n)
            time.sleep(min(store.retry_in(), 0.05))
        if n > 100_000:
            raise AssertionError("the writes never got through again")
    restarting.join()
    while not store.available():
        time.sleep(store.retry_in() or 0.05)
    stored = store.last_messages(channel.id, 100_000)
    texts = [m.text for m in stored]
    assert len(texts) == len(set(texts))  # written once each
    assert all(f"message {n}" in texts for n in done)  # done means written
    assert all(store.txn_seen(f"txn-{n}") for n in done)
    assert {t.prompt_event for t in store.turns.unfinished()} >= {f"$m{n}" for n in done}
    assert store.reconnects >= 1
    with pytest.raises(StoreLocked):
        Store.open(restartable_postgres.url)


@pg
def test_while_the_server_is_down_calls_fail_at_once_then_it_comes_back(restartable_postgres, pg_store, monkeypatch):
    from store import resilience

    monkeypatch.setattr(resilience, "FIRST_DELAY", 4.0)  # a window the checks below cannot miss
    store = pg_store()
    channel = store.create_channel("!room:hs", "general")
    restartable_postgres.cluster.shut_down()
    try:
        with pytest.raises(StoreUnavailable) as caught:
            store.add_message(channel.id, "@me:hs", "user", "while down", ["$down"])
        assert "PostgreSQL server cannot be reached" in str(caught.value) and "\n" not in str(caught.value)
        assert not store.available()
        attempts = store.core.reconnector.attempts
        assert store.retry_in() > 0
        with pytest.raises(StoreUnavailable, match="next attempt in"):
            store.txn_seen("t")  # before the next attempt is due: it refuses without trying
        assert store.core.reconnector.attempts == attempts  # no connection was tried (no blocking)
    finally:
        restartable_postgres.cluster.start_again()
    while not store.available():
        time.sleep(store.retry_in() or 0.05)
    assert [m.text for m in store.last_messages(channel.id, 10)] == []  # the refused one: not written
    store.add_message(channel.id, "@me:hs", "user", "back", ["$back"])
    assert [m.text for m in store.last_messages(channel.id, 10)] == ["back"]


@pg
def test_another_bridge_taking_the_database_meanwhile_stops_this_store(restartable_postgres, pg_store):
    first = pg_store()
    channel = first.create_channel("!room:hs", "general")
    restartable_postgres.cluster.shut_down()
    try:
        with pytest.raises(StoreUnavailable):
            first.txn_seen("t")
    finally:
        restartable_postgres.cluster.start_again()
    second = pg_store()  # another bridge starts while the first one is cut off, and gets the lock
    while first.retry_in() > 0:
        time.sleep(first.retry_in())
    with pytest.raises(StoreLockLost) as caught:
        first.available()
    message = str(caught.value)
    assert "another bridge took the PostgreSQL database" in message and "\n" not in message
    for call in (lambda: first.txn_seen("t"), lambda: first.last_messages(channel.id, 1), first.available):
        with pytest.raises(StoreLockLost):  # for good: it never writes beside the other bridge
            call()
    second.add_message(channel.id, "@me:hs", "user", "the second bridge's", ["$2"])
    assert [m.text for m in second.last_messages(channel.id, 10)] == ["the second bridge's"]


@pg
def test_its_own_dead_backend_holding_the_lock_is_not_another_bridge(restartable_postgres, pg_store):
    store = pg_store()
    url = restartable_postgres.url
    name = store.core.db.connect_params["application_name"]
    with _admin(url) as admin, admin.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", (_backend_of(store, url),))
    # what a lost network leaves: a backend of this store that still holds the lock (played by
    # a connection under the store's name), until the server notices it is gone
    ghost = psycopg2.connect(url, application_name=name)
    ghost.autocommit = True
    with ghost.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", (PG_LOCK_KEY,))
    assert store.txn_seen("t") is False  # reconnected, the ghost ended, the lock taken
    with pytest.raises(psycopg2.Error):
        with ghost.cursor() as cursor:
            cursor.execute("SELECT 1")
    with pytest.raises(StoreLocked):
        Store.open(url)


@pg
def test_a_server_down_at_open_is_unavailable_not_a_traceback(restartable_postgres):
    restartable_postgres.cluster.shut_down()
    try:
        with pytest.raises(StoreUnavailable) as caught:
            Store.open(restartable_postgres.url)
    finally:
        restartable_postgres.cluster.start_again()
    assert str(caught.value).startswith("cannot connect to PostgreSQL: ") and "\n" not in str(caught.value)


# ---- SQLite -----------------------------------------------------------------------------------


def _sqlite(tmp_path) -> Store:
    return Store.open("sqlite", tmp_path / "data")


def test_a_full_sqlite_database_refuses_writes_and_records_nothing(tmp_path):
    store = _sqlite(tmp_path)
    try:
        channel = store.create_channel("!room:hs", "general")
        store.add_message(channel.id, "@me:hs", "user", "fits", ["$fits"])
        # the database may not grow by a page: what a full disk does to SQLite (SQLITE_FULL)
        pages = store.core.db.execute_sql("PRAGMA page_count").fetchone()[0]
        store.core.db.execute_sql(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreUnwritable) as caught:
            store.add_message(channel.id, "@me:hs", "user", "x" * 200_000, ["$big"])
        message = str(caught.value)
        assert message == (f"add_message: cannot write {tmp_path / 'data' / 'sidekicks.db'}: the disk is full")
        assert isinstance(caught.value, StoreUnavailable)  # the bridge waits on it like on a restart
        with pytest.raises(StoreUnwritable):
            store.turns.take(channel.id, "@me:hs", "y" * 500_000, "$p", [("alice", "y" * 500_000, False)], "run")
        # nothing of the failed calls is recorded; reads still work
        assert [m.text for m in store.last_messages(channel.id, 10)] == ["fits"]
        assert store.message_by_event("$big") is None and store.turns.unfinished() == []
        store.core.db.execute_sql("PRAGMA max_page_count = 1073741823")  # space again
        store.add_message(channel.id, "@me:hs", "user", "x" * 200_000, ["$big"])
        assert store.message_by_event("$big") is not None
    finally:
        store.close()


def test_a_read_only_sqlite_database_refuses_writes_and_records_nothing(tmp_path):
    store = _sqlite(tmp_path)
    try:
        channel = store.create_channel("!room:hs", "general")
        store.mark_txn("before")
        store.core.db.execute_sql("PRAGMA query_only = 1")  # SQLite refuses every write: SQLITE_READONLY
        for write in (
            lambda: store.mark_txn("during"),
            lambda: store.add_message(channel.id, "@me:hs", "user", "lost?", ["$x"]),
            lambda: store.turns.take(channel.id, "@me:hs", "lost?", "$y", [("alice", "x", False)], "run"),
        ):
            with pytest.raises(StoreUnwritable, match="it is read-only$"):
                write()
        assert store.txn_seen("before") and not store.txn_seen("during")
        assert store.last_messages(channel.id, 10) == [] and store.turns.unfinished() == []
        store.core.db.execute_sql("PRAGMA query_only = 0")
        store.mark_txn("during")
        assert store.txn_seen("during")
    finally:
        store.close()


CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys
    sys.path.insert(0, sys.argv[2])
    from store import Store, StoreUnwritable
    folder = sys.argv[1]
    store = Store.open("sqlite", folder)
    channel = store.create_channel("!room:hs", "general")
    # a file may grow by 256 KiB more: past that the kernel refuses the write (EFBIG), as a full
    # disk does (ENOSPC); SIGXFSZ would kill the process first, so it is ignored
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sizes = [os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)]
    limit = max(sizes) + 256 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    written, error = [], None
    for n in range(1000):
        try:
            store.add_message(channel.id, "@me:hs", "user", f"{n} " + "z" * 20_000, [f"$m{n}"])
            written.append(n)
        except StoreUnwritable as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
    print(json.dumps({"written": written, "error": error, "room": channel.id}))
""")


def test_a_file_system_refusing_writes_is_unwritable_and_loses_nothing_written(tmp_path):
    folder = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), str(REPO)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    import json

    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["error"] and report["error"].startswith("StoreUnwritable: add_message: cannot write "), report
    assert "\n" not in report["error"] and report["written"]
    store = _sqlite(tmp_path)  # what the next start finds
    try:
        stored = [m.text.split(" ", 1)[0] for m in store.last_messages(report["room"], 10_000)]
        assert stored == [str(n) for n in report["written"]]  # every one reported written, none other
    finally:
        store.close()
