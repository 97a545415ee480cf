"""The hot queries read an index range: their cost cannot grow with history.

White-box: these look at the SQL the store runs and at the database's plans
for it, because a timing test would be slow and flaky.
"""

import pytest

HOT = ["last", "after", "by_event", "last_agent_sender", "channel_exists"]
VALUES = {"channel_id": "c", "id": "c", "after": "0", "limit": 20, "event_id": "$e"}


def plan(store, name: str) -> str:
    compiled = vars(store.core.queries)[name]
    params = compiled.params(**VALUES)
    prefix = "EXPLAIN QUERY PLAN " if is_sqlite(store) else "EXPLAIN "
    rows = store.core.db.execute_sql(prefix + compiled.sql, params).fetchall()
    return "\n".join(str(row[-1]) for row in rows)


def is_sqlite(store) -> bool:
    return type(store.core.db).__name__ == "SqliteDatabase"


@pytest.fixture
def planned(store):
    channel = store.create_channel("!room:hs", "general")
    for i in range(5):
        store.add_message(channel.id, "alice", "agent", str(i), [f"$e{i}"])
    if not is_sqlite(store):
        # Tiny tables make sequential scans cheapest; forbid them, and sorts,
        # so that a plan shows whether an index path exists at all.
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            store.core.db.execute_sql(f"SET {setting} = off")
    yield store
    if not is_sqlite(store):
        store.core.db.execute_sql("RESET ALL")


@pytest.mark.parametrize("name", HOT)
def test_hot_query_uses_an_index(planned, name):
    text = plan(planned, name)
    if is_sqlite(planned):
        assert "SCAN" not in text, text
        if name in ("last", "after"):
            # The channel's own range of the key, in key order: nothing sorted.
            assert "(channel_id=?" in text and "TEMP B-TREE" not in text, text
    else:
        assert "Seq Scan" not in text and "Filter" not in text, text
        if name in ("last", "after"):
            assert "Index Cond: ((channel_id" in text or "Index Cond: (channel_id" in text, text
            assert "Sort" not in text, text


def test_messages_have_no_index_on_id_alone(store):
    # Given one, PostgreSQL may walk the whole table backwards to find the
    # last messages of a quiet channel (see schema.py).
    if is_sqlite(store):
        rows = store.core.db.execute_sql("PRAGMA index_list('sk_message')").fetchall()
        columns = [
            tuple(r[2] for r in store.core.db.execute_sql(f"PRAGMA index_info('{row[1]}')").fetchall()) for row in rows
        ]
    else:
        rows = store.core.db.execute_sql(
            "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0] "
            "WHERE c.relname = 'sk_message'"
        ).fetchall()
        columns = [(r[0],) for r in rows]
    assert columns and all(cols[0] == "channel_id" for cols in columns), columns
