"""Processed transaction keys are pruned by age, on every backend, and a store
made before they were gets its column (a migration), its old keys counted as seen at that moment."""

import sqlite3

import peewee as pw
import pytest

from store import Store, txns


def _age(store: Store, txn_id: str, ms: int) -> None:
    """Make a key look `ms` older (a test cannot wait days)."""
    T = store.core.models.Txn
    T.update(seen=T.seen - ms).where(T.id == txn_id).execute()


def test_keys_older_than_the_horizon_are_pruned_younger_ones_kept(store):
    assert store.txn_keep_ms == 7 * 24 * 3600 * 1000  # days: what a homeserver may still retry
    for key in ("old", "young"):
        store.mark_txn(key)
    _age(store, "old", store.txn_keep_ms + 1000)
    _age(store, "young", store.txn_keep_ms - 60_000)
    assert store.prune_txns() == 1
    assert not store.txn_seen("old") and store.txn_seen("young")


def _later(monkeypatch, store: Store) -> None:
    """The pruning interval has passed (a test cannot wait an hour)."""
    now = txns.now_ms
    monkeypatch.setattr(txns, "now_ms", lambda: now() + store.txn_prune_every_ms + 1)


def test_mark_txn_prunes_now_and_then_not_every_time(store, monkeypatch):
    store.mark_txn("first")  # the first mark of a run prunes (keys left by the last run)
    _age(store, "first", store.txn_keep_ms + 1000)
    store.mark_txn("second")  # within the interval: no prune yet
    assert store.txn_seen("first")
    _later(monkeypatch, store)
    store.mark_txn("third")
    assert not store.txn_seen("first") and store.txn_seen("second") and store.txn_seen("third")


def test_a_store_made_before_pruning_is_migrated(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    # the old layout of sk_txn: a key and nothing else
    with sqlite3.connect(folder / "sidekicks.db") as old:
        old.execute("CREATE TABLE sk_txn (id TEXT NOT NULL PRIMARY KEY)")
        old.executemany("INSERT INTO sk_txn (id) VALUES (?)", [("kept-1",), ("kept-2",)])
    store = Store.open("sqlite", folder)
    try:
        assert store.txn_seen("kept-1") and store.txn_seen("kept-2")  # not lost by the migration
        assert store.prune_txns() == 0  # seen at the migration: kept one horizon more
        _age(store, "kept-1", store.txn_keep_ms + 1000)
        assert store.prune_txns() == 1
        assert not store.txn_seen("kept-1") and store.txn_seen("kept-2")
        store.mark_txn("new")
        assert store.txn_seen("new")
    finally:
        store.close()
    with sqlite3.connect(folder / "sidekicks.db") as db:  # the index the pruning uses is there
        indexes = [row[1] for row in db.execute("PRAGMA index_list('sk_txn')")]
    assert any("seen" in name for name in indexes), indexes
    Store.open("sqlite", folder).close()  # a second open finds nothing to migrate


@pytest.mark.postgres
def test_a_postgresql_store_made_before_pruning_is_migrated(postgres_url, drop_tables):
    drop_tables(postgres_url)
    db = pw.PostgresqlDatabase("postgresql://" + postgres_url.split("://", 1)[1])
    db.connect()
    db.execute_sql("CREATE TABLE sk_txn (id TEXT NOT NULL PRIMARY KEY)")
    db.execute_sql("INSERT INTO sk_txn (id) VALUES ('kept')")
    db.close()
    store = Store.open(postgres_url)
    try:
        assert store.txn_seen("kept") and store.prune_txns() == 0
        _age(store, "kept", store.txn_keep_ms + 1000)
        assert store.prune_txns() == 1 and not store.txn_seen("kept")
    finally:
        store.close()


def test_the_horizon_is_days(store):
    assert txns.TXN_KEEP_MS >= 24 * 3600 * 1000
    assert txns.TXN_PRUNE_EVERY_MS <= txns.TXN_KEEP_MS


def test_a_take_that_records_its_event_prunes_now_and_then_too(store, monkeypatch):
    """An owner message taken with its turns records its event's key in that write, without the
    dispatcher's mark_txn: those writes prune as well, or a bridge that only ever gets owner
    messages keeps every key (the soak bench found it: 10,000 keys after 10,000 messages with a
    20 s horizon)."""
    from store import keys

    channel = store.create_channel("!r:hs", "c")
    store.mark_txn("old")
    _age(store, "old", store.txn_keep_ms + 1000)
    _later(monkeypatch, store)
    store.turns.take(channel.id, "@me:hs", "hi", "$m1", [("alice", "hi", False)], "run")
    assert not store.txn_seen("old") and store.txn_seen(keys.handled_event("$m1"))
