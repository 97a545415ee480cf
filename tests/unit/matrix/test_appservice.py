"""The appservice HTTP API in isolation: tokens and transaction keys (aiohttp test server)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp.test_utils import TestServer
from appservice_kit import AUTH, TOKEN, serving

from bridge.matrix.appservice import AppserviceServer, TransactionOrder, transaction_key


def recording(calls: list):
    async def on_transaction(transaction):
        calls.append([e["event_id"] for e in transaction.events])

    return on_transaction


async def puppets(user_id):
    return user_id.startswith("@sk_")


def make_client(calls: list, seen: set):
    return serving(recording(calls), seen, on_user=puppets)


def body(*event_ids, kind="m.room.encrypted"):
    """A transaction of events with no record of their own: the appservice records the
    transaction (a plain room event is de-duplicated by the dispatcher, by its event id)."""
    return {
        "events": [{"event_id": e, "type": kind, "room_id": "!r", "sender": "@a:b", "content": {}} for e in event_ids]
    }


async def test_a_transaction_sent_again_is_handled_once():
    calls, seen = [], set()
    async with make_client(calls, seen) as client:
        for _ in range(3):
            response = await client.put("/_matrix/app/v1/transactions/7", json=body("$a", "$b"), headers=AUTH)
            assert response.status == 200 and await response.json() == {}
        assert calls == [["$a", "$b"]]
        # a restarted bridge has the same keys in its store: a second server over the same set
        async with make_client(calls, seen) as again:
            response = await again.put("/_matrix/app/v1/transactions/7", json=body("$a", "$b"), headers=AUTH)
            assert response.status == 200
        assert calls == [["$a", "$b"]]


async def test_a_reused_id_with_new_events_is_a_new_transaction():
    # Synapse on SQLite numbers transactions from 1 again after it restarts
    calls, seen = [], set()
    async with make_client(calls, seen) as client:
        for events in (("$a",), ("$c",)):
            response = await client.put("/_matrix/app/v1/transactions/1", json=body(*events), headers=AUTH)
            assert response.status == 200
        assert calls == [["$a"], ["$c"]]
        assert transaction_key("1", [{"event_id": "$a"}]) != transaction_key("1", [{"event_id": "$c"}])


async def test_bad_tokens_are_forbidden_and_bad_bodies_refused():
    calls, seen = [], set()
    async with make_client(calls, seen) as client:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Token {TOKEN}"}):
            for method, path in (
                ("PUT", "/_matrix/app/v1/transactions/1"),
                ("GET", "/_matrix/app/v1/users/@sk_a:b"),
                ("POST", "/_matrix/app/v1/ping"),
                ("GET", "/_matrix/app/v1/rooms/%23x:b"),
            ):
                response = await client.request(method, path, json=body("$a"), headers=headers)
                assert response.status == 403
                assert (await response.json())["errcode"] == "M_FORBIDDEN"
        response = await client.put("/_matrix/app/v1/transactions/2", data=b"{not json", headers=AUTH)
        assert response.status == 400
        response = await client.get("/_matrix/app/v1/users/@sk_a:b", headers=AUTH)
        assert response.status == 200
        response = await client.get("/_matrix/app/v1/users/@other:b", headers=AUTH)
        assert response.status == 404
        assert calls == []


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def put(client, txn_id: str, *event_ids) -> int:
    response = await client.put(f"/_matrix/app/v1/transactions/{txn_id}", json=body(*event_ids), headers=AUTH)
    return response.status


async def test_a_transaction_left_behind_comes_before_the_ones_after_it():
    # Synapse's recoverer race: 4 is stored unsent while 5 goes out at once; 5 is refused until
    # the homeserver, recovering again, sends 4 first
    calls, seen, kept = [], set(), {}
    clock = Clock()
    order = TransactionOrder(lambda: kept.get("v"), lambda v: kept.__setitem__("v", v), clock)

    async with serving(recording(calls), seen, order=order) as client:
        assert [await put(client, str(n), f"${n}") for n in (1, 2, 3)] == [200, 200, 200]
        assert await put(client, "5", "$5") == 500
        clock.now += 2  # the homeserver's first retry: the oldest unsent one, then the refused one
        assert await put(client, "4", "$4") == 200
        assert await put(client, "5", "$5") == 200
        assert calls == [["$1"], ["$2"], ["$3"], ["$4"], ["$5"]]
        # across a restart of the bridge: the number is kept
        again = TransactionOrder(lambda: kept.get("v"), lambda v: kept.__setitem__("v", v), clock)
        assert again.last == 5 and not again.admit("7") and again.admit("6")


def test_a_gap_is_refused_once_and_the_same_transaction_again_is_let_through():
    # Synapse numbers all its appservices' transactions from one sequence: a skipped number is
    # usually another appservice's. Refused once, the homeserver recovers and sends whatever of
    # ours is unsent, oldest first: the same transaction again means nothing was left behind
    order = TransactionOrder(clock=Clock())
    for n in (1, 2, 3):
        assert order.admit(str(n))
        order.handled(str(n))
    assert not order.admit("5")
    assert order.admit("5")
    order.handled("5")
    assert not order.armed
    # disarmed: the next gaps (other appservices) are let through at once
    for n in (8, 12, 13, 20):
        assert order.admit(str(n))
        order.handled(str(n))
    # a refusal of ours (say the database was away) makes the homeserver recover: armed again
    order.refused()
    assert not order.admit("25") and order.admit("25")


async def test_once_a_gap_was_let_through_each_transaction_is_handed_over_to_be_read_back_first():
    # test_kill9's "out of order": a start, 4's number lost to the kill, 5 refused once and let
    # through when it comes again — the check is disarmed. That refusal made Synapse recover, and
    # the end of the recovery left 7 (msg 32) unsent while 8 (a receipt) and 9 (msg 33) went out
    # at once: from 5 on, each transaction is handed to `on_gap_passed` (with when the last gap
    # was let through) before it is handled — the rooms of its messages are read back there
    # (matrix/left_behind.py), and msg 32 is taken before msg 33
    calls: list = []
    clock = Clock()

    async def reading_back(transaction, gap_at):
        calls.append((transaction.txn_id, gap_at))

    order = TransactionOrder(clock=clock)
    async with serving(recording(calls), set(), order=order, on_gap_passed=reading_back) as client:
        assert [await put(client, str(n), f"${n}") for n in (1, 2, 3)] == [200, 200, 200]
        assert await put(client, "5", "$5") == 500
        clock.now = 1.0
        assert await put(client, "5", "$5") == 200
        assert not order.armed
        clock.now = 2.0
        assert [await put(client, str(n), f"${n}") for n in (6, 8, 9)] == [200, 200, 200]
        clock.now = 3.0
        assert await put(client, "7", "$7") == 200  # late: no gap before it
    assert calls == [
        *(["$1"], ["$2"], ["$3"]),
        ("5", 1.0),
        ["$5"],
        ("6", 1.0),
        ["$6"],
        ("8", 2.0),  # 7 left behind
        ["$8"],
        ("9", 2.0),
        ["$9"],
        ("7", 2.0),
        ["$7"],
    ]


def test_a_gap_never_filled_holds_back_only_for_a_while():
    clock = Clock()
    order = TransactionOrder(clock=clock)
    for n in (1, 2, 3):
        order.handled(str(n))
    assert not order.admit("5")
    order._refused = None  # (as if the homeserver sent another one after the gap instead)
    clock.now += TransactionOrder.PATIENCE - 0.5
    assert not order.admit("6")
    order._refused = None
    clock.now += 1
    assert order.admit("6")  # let through, and the check is disarmed
    order.handled("6")
    assert order.last == 6 and not order.armed and order.admit("9")
    order.handled("4")  # the late one, if it comes after all: the count goes on from 6
    assert order.last == 6


def test_ids_that_are_not_numbers_are_never_held_back():
    order = TransactionOrder(clock=Clock())
    for txn_id in ("abc", "1700000000000000001", "x-5"):
        assert order.admit(txn_id)
        order.handled(txn_id)
    # Synapse on SQLite numbers from 1 again after it restarts: 1 is a new start, not a late one
    for n in (40, 1, 2, 3):
        order.handled(str(n))
    assert order.last == 3 and not order.admit("5")


async def test_a_transaction_seen_before_counts_as_handled_and_patience_runs_across_restarts():
    # killed after recording 4 but before keeping its number: the homeserver sends 4 again,
    # which is acknowledged as seen; 5 must not wait for a 4 that will never come again
    calls, seen, kept = [], set(), {}
    clock = Clock()
    order = TransactionOrder(lambda: kept.get("v"), lambda v: kept.__setitem__("v", v), clock)
    for n in (1, 2, 3):
        order.handled(str(n))
    seen.add(transaction_key("4", body("$4")["events"]))

    async with serving(recording(calls), seen, order=order) as client:
        assert await put(client, "4", "$4") == 200 and calls == []
        assert await put(client, "5", "$5") == 200 and calls == [["$5"]]
    # a gap that outlives restarts of the bridge is let through PATIENCE after it was first seen
    assert not order.admit("7")
    clock.now += TransactionOrder.PATIENCE / 2
    restarted = TransactionOrder(lambda: kept.get("v"), lambda v: kept.__setitem__("v", v), clock)
    assert not restarted.admit("7")
    clock.now += TransactionOrder.PATIENCE / 2 + 0.1
    again = TransactionOrder(lambda: kept.get("v"), lambda v: kept.__setitem__("v", v), clock)
    assert again.admit("7")


async def test_a_transaction_whose_events_have_records_of_their_own_is_answered_without_the_store():
    """Receipts and typing (most of them the echoes of the bridge's own), and plain room events
    (each de-duplicated by its event id in the dispatcher), are answered without a round trip to
    the store; the transaction still counts in the order. Encrypted events and device traffic
    have no key of their own: their transaction is checked and recorded."""
    store_calls: list = []

    async def seen(key):
        store_calls.append(("seen", key))
        return False

    async def mark(key):
        store_calls.append(("mark", key))

    handled: list = []

    async def on_transaction(transaction):
        handled.append((transaction.txn_id, len(transaction.ephemeral)))

    order = TransactionOrder()
    async with serving(on_transaction, seen=seen, mark=mark, order=order) as client:
        receipt = {"type": "m.receipt", "room_id": "!r", "content": {"$e": {"m.read": {"@sk_a:b": {"ts": 1}}}}}
        response = await client.put("/_matrix/app/v1/transactions/5", json={"ephemeral": [receipt]}, headers=AUTH)
        assert response.status == 200
        assert store_calls == [] and handled == [("5", 1)] and order.last == 5
        response = await client.put(
            "/_matrix/app/v1/transactions/6", json=body("$m", kind="m.room.message"), headers=AUTH
        )
        assert response.status == 200
        assert store_calls == [] and [h[0] for h in handled] == ["5", "6"] and order.last == 6
        response = await client.put("/_matrix/app/v1/transactions/7", json=body("$a"), headers=AUTH)
        assert response.status == 200
        assert [kind for kind, _ in store_calls] == ["seen", "mark"] and order.last == 7
        response = await client.put(
            "/_matrix/app/v1/transactions/8", json={"to_device": [{"type": "m.room_key"}]}, headers=AUTH
        )
        assert response.status == 200
        assert [kind for kind, _ in store_calls] == ["seen", "mark", "seen", "mark"] and order.last == 8


async def test_a_sender_that_hangs_up_mid_transaction_is_told_once_with_the_time_it_came():
    """Synapse's appservice sender killed while the bridge handles its transaction: what it had
    queued behind it is lost, so the bridge is told (and reads back); an answer that reaches
    its sender tells nothing."""
    gone: list[float] = []
    held, go = asyncio.Event(), asyncio.Event()

    async def on_transaction(transaction):
        if transaction.events[0]["event_id"] == "$held":
            held.set()
            await go.wait()

    keys: set = set()

    async def seen(key):
        return key in keys

    async def mark(key):
        keys.add(key)

    server = AppserviceServer(TOKEN, on_transaction, puppets, seen, mark, on_sender_gone=gone.append)
    test_server = TestServer(server.app)
    await test_server.start_server()
    try:
        url = f"http://127.0.0.1:{test_server.port}/_matrix/app/v1/transactions"
        async with aiohttp.ClientSession(headers=AUTH) as http:
            async with http.put(f"{url}/1", json=body("$plain")) as response:
                assert response.status == 200
            assert gone == []  # answered to a sender still there
            before = time.time()
            request = asyncio.ensure_future(http.put(f"{url}/2", json=body("$held")))
            await asyncio.wait_for(held.wait(), 10)
            request.cancel()  # the sender hangs up while the transaction is handled
            await asyncio.gather(request, return_exceptions=True)
        go.set()
        deadline = time.monotonic() + 10
        while not gone and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(gone) == 1 and before <= gone[0] <= time.time()
    finally:
        go.set()
        await test_server.close()


def test_a_gap_long_after_the_last_recovery_is_another_appservices_number_and_reads_nothing_back():
    # Synapse numbers every appservice's transactions from one sequence: on a homeserver shared
    # with other bridges most gaps are theirs. Only a gap after a transaction that came while
    # Synapse may have been recovering this appservice (RECOVERY after a start or a refusal) may
    # hide one left behind; later gaps let through set no `gap_at` (no read-back before each message)
    clock = Clock()
    order = TransactionOrder(clock=clock)
    for n in (1, 2, 3):
        order.handled(str(n))
    assert not order.admit("5") and order.admit("5")  # refused once, let through
    order.handled("5")
    assert order.gap_at == 0.0
    clock.now = 30.0
    assert order.admit("7")  # after 5, handled at 0: Synapse may still have been recovering
    order.handled("7")
    assert order.gap_at == 30.0
    clock.now = 100.0
    assert order.admit("9")  # after 7, handled at 30: still within RECOVERY of the start
    order.handled("9")
    assert order.gap_at == 100.0
    clock.now = 200.0
    assert order.admit("12")  # after 9, handled at 100: long after — another appservice's gap
    order.handled("12")
    assert order.gap_at == 100.0
    order.refused()  # a refusal: Synapse recovers again
    clock.now = 210.0
    assert order.admit("13")
    order.handled("13")
    clock.now = 220.0
    assert not order.admit("15") and order.admit("15")  # armed again: refused once
    assert order.gap_at == 220.0


def test_a_gap_refused_long_after_the_start_counts_as_a_refusal_for_the_one_left_behind():
    # test_kill9 under load ("out of order": msg 33 answered before msg 32 across a restart, a
    # transaction refused as out of sequence just before): the start took longer than RECOVERY
    # (or the bridge had run for long), then a gap was refused. That refusal makes Synapse recover
    # like any other, and the end of that recovery can leave 6 (msg 32) unsent while 7 (msg 33)
    # goes out. The gap before 7 must set `gap_at` (a room read back at 101 is read again), else
    # msg 33 is answered first and msg 32 only when Synapse's next failure sends 6
    clock = Clock()
    order = TransactionOrder(clock=clock)
    for n in (1, 2, 3):
        order.handled(str(n))
    clock.now = 100.0  # long after the start: the first gap of this run
    assert not order.admit("5")
    clock.now = 101.0
    assert order.admit("5") and order.gap_at == 101.0  # the refused one again: let through
    order.handled("5")
    clock.now = 102.0
    assert order.admit("7")  # 6 left behind at the end of the recovery the refusal started
    assert order.gap_at == 102.0
