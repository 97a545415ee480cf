"""The benchmarks' store filler (tests/bench/bench_store.py `fill_store`) writes through the
store's public core: a change of the store that breaks it fails here, not only in a benchmark
run (bench_scale, bench_start, bench_store use it)."""

from __future__ import annotations

import importlib
from pathlib import Path

from store import Store

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_bench_filler_fills_a_store_the_store_reads(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the benchmarks run as scripts from their folder
    bench_store = importlib.import_module("bench_store")
    store = Store.open("sqlite", tmp_path)
    try:
        bench_store.fill_store(store, 200, channels=10, live=True)
        (messages,) = store.core.db.execute_sql("SELECT count(*) FROM sk_message").fetchone()
        assert messages == 200 + 2 * bench_store.UNSEEN
        unfinished = store.turns.unfinished()
        assert [turn.channel_id for turn in unfinished] == [bench_store.QUERIED]
    finally:
        store.close()
