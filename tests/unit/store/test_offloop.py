"""The store's calls off the loop (store/offloop.py): in order, and a value written often
(LatestWrite) written once per interval, its newest."""
from __future__ import annotations

import asyncio

from store import Store
from store.offloop import LatestWrite, OffLoop


async def test_the_database_thread_runs_calls_in_the_order_they_were_made():
    db = OffLoop(Store.open(":memory:"))
    done: list[int] = []
    for n in range(5):
        db.soon(f"write {n}", lambda n=n: done.append(n))
    assert await db.run(lambda: list(done)) == [0, 1, 2, 3, 4]
    db.target.close()


async def test_a_value_written_often_is_written_once_per_interval_its_newest():
    store = Store.open(":memory:")
    db = OffLoop(store)
    writes: list[str] = []
    latest = LatestWrite(db, "a number", lambda s, value: writes.append(value), delay=0.05)
    for n in range(10):
        latest(str(n))
    await db.run(lambda: None)
    assert writes == []  # none yet: the interval runs

    async def until_written():
        while not writes:
            await db.run(lambda: None)
            await asyncio.sleep(0.01)
    await asyncio.wait_for(until_written(), 5)
    assert writes == ["9"]
    latest("10")
    latest.flush()  # a clean stop: written at once
    await db.run(lambda: None)
    assert writes == ["9", "10"]
    latest.flush()  # nothing waiting: nothing written again
    await db.run(lambda: None)
    assert writes == ["9", "10"]
    store.close()


def test_without_a_running_loop_a_value_is_written_at_once():
    store = Store.open(":memory:")
    latest = LatestWrite(OffLoop(store), "a number", lambda s, value: s.set_value("k", value), delay=60)
    latest("1")  # before the bridge's loop runs: written at once, here
    assert store.get_value("k") == "1"
    store.close()
