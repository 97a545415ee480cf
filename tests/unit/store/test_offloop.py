"""The store's calls off the loop (store/offloop.py): in order."""

from __future__ import annotations

from store import Store
from store.offloop import OffLoop


async def test_the_database_thread_runs_calls_in_the_order_they_were_made():
    db = OffLoop(Store.open(":memory:"))
    done: list[int] = []
    for n in range(5):
        db.soon(f"write {n}", lambda n=n: done.append(n))
    assert await db.run(lambda: list(done)) == [0, 1, 2, 3, 4]
    db.target.close()
