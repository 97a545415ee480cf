"""store.e2ee (store/e2ee.py): the encrypted events waiting for their room key, and the rooms
known to be encrypted — a row each, on every backend."""

from store.offloop import OffLoop


def event(n: int, room: str = "!r:hs", session: str = "S") -> dict:
    return {
        "event_id": f"$e{n}",
        "room_id": room,
        "type": "m.room.encrypted",
        "content": {"session_id": session, "ciphertext": f"c{n}"},
    }


def wait(store, n: int, room: str = "!r:hs", session: str = "S", most: int | None = None) -> None:
    store.e2ee.wait(f"$e{n}", room, session, event(n, room, session), most)


def test_events_wait_in_the_order_they_came_and_are_listed_per_room_and_session(store):
    assert store.e2ee.waiting() == []
    wait(store, 1)
    wait(store, 2, session="T")
    wait(store, 3, room="!other:hs")
    wait(store, 4)
    assert [e["event_id"] for e in store.e2ee.waiting()] == ["$e1", "$e2", "$e3", "$e4"]
    assert store.e2ee.waiting("!r:hs") == [event(1), event(2, session="T"), event(4)]
    assert store.e2ee.waiting("!r:hs", "S") == [event(1), event(4)]
    assert store.e2ee.waiting("!nowhere:hs") == []


def test_an_event_waits_once_and_goes_when_done(store):
    wait(store, 1)
    store.e2ee.wait("$e1", "!r:hs", "S", {"event_id": "$e1", "again": True})  # delivered again
    assert store.e2ee.waiting() == [event(1)]
    assert store.e2ee.done("$e1") is True
    assert store.e2ee.done("$e1") is False
    assert store.e2ee.waiting() == []


def test_only_the_newest_events_are_kept_when_told_how_many(store):
    for n in range(5):
        wait(store, n, most=3)
    assert [e["event_id"] for e in store.e2ee.waiting()] == ["$e2", "$e3", "$e4"]
    wait(store, 5)  # no bound: none goes
    assert len(store.e2ee.waiting()) == 4


def test_the_encrypted_rooms_are_kept_once_each(store):
    assert store.e2ee.encrypted_rooms() == []
    store.e2ee.mark_encrypted("!b:hs")
    store.e2ee.mark_encrypted("!a:hs")
    store.e2ee.mark_encrypted("!b:hs")
    assert store.e2ee.encrypted_rooms() == ["!a:hs", "!b:hs"]


def test_they_outlive_the_store(open_durable):
    store = open_durable()
    wait(store, 1)
    store.e2ee.mark_encrypted("!r:hs")
    store.close()
    again = open_durable()
    assert again.e2ee.waiting() == [event(1)] and again.e2ee.encrypted_rooms() == ["!r:hs"]


async def test_its_calls_run_off_the_loop(store):
    db = OffLoop(store)
    await db.e2ee.wait("$e1", "!r:hs", "S", event(1))
    await db.e2ee.mark_encrypted("!r:hs")
    assert await db.e2ee.waiting("!r:hs", "S") == [event(1)]
    assert await db.e2ee.encrypted_rooms() == ["!r:hs"]
    assert await db.e2ee.done("$e1")
    db.thread.close()
