"""The appservice HTTP API in isolation: tokens and transaction keys (aiohttp test server)."""
from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from bridge.appservice import AppserviceServer, transaction_key

TOKEN = "hs-secret"


async def make_client(calls: list, seen: set) -> TestClient:
    async def on_transaction(transaction):
        calls.append([e["event_id"] for e in transaction.events])

    async def on_user(user_id):
        return user_id.startswith("@sk_")

    server = AppserviceServer(TOKEN, on_transaction, on_user, seen.__contains__, seen.add)
    client = TestClient(TestServer(server.app))
    await client.start_server()
    return client


def body(*event_ids):
    return {"events": [{"event_id": e, "type": "m.room.message", "room_id": "!r", "sender": "@a:b",
                        "content": {}} for e in event_ids]}


async def test_a_transaction_sent_again_is_handled_once():
    calls, seen = [], set()
    client = await make_client(calls, seen)
    try:
        for _ in range(3):
            response = await client.put("/_matrix/app/v1/transactions/7", json=body("$a", "$b"),
                                        headers={"Authorization": f"Bearer {TOKEN}"})
            assert response.status == 200 and await response.json() == {}
        assert calls == [["$a", "$b"]]
        # a restarted bridge has the same keys in its store: a second server over the same set
        again = await make_client(calls, seen)
        try:
            response = await again.put("/_matrix/app/v1/transactions/7", json=body("$a", "$b"),
                                       headers={"Authorization": f"Bearer {TOKEN}"})
            assert response.status == 200
        finally:
            await again.close()
        assert calls == [["$a", "$b"]]
    finally:
        await client.close()


async def test_a_reused_id_with_new_events_is_a_new_transaction():
    # Synapse on SQLite numbers transactions from 1 again after it restarts
    calls, seen = [], set()
    client = await make_client(calls, seen)
    try:
        for events in (("$a",), ("$c",)):
            response = await client.put("/_matrix/app/v1/transactions/1", json=body(*events),
                                        headers={"Authorization": f"Bearer {TOKEN}"})
            assert response.status == 200
        assert calls == [["$a"], ["$c"]]
        assert transaction_key("1", [{"event_id": "$a"}]) != transaction_key("1", [{"event_id": "$c"}])
    finally:
        await client.close()


async def test_bad_tokens_are_forbidden_and_bad_bodies_refused():
    calls, seen = [], set()
    client = await make_client(calls, seen)
    try:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Token {TOKEN}"}):
            for method, path in (("PUT", "/_matrix/app/v1/transactions/1"), ("GET", "/_matrix/app/v1/users/@sk_a:b"),
                                 ("POST", "/_matrix/app/v1/ping"), ("GET", "/_matrix/app/v1/rooms/%23x:b")):
                response = await client.request(method, path, json=body("$a"), headers=headers)
                assert response.status == 403
                assert (await response.json())["errcode"] == "M_FORBIDDEN"
        response = await client.put("/_matrix/app/v1/transactions/2", data=b"{not json",
                                    headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status == 400
        response = await client.get("/_matrix/app/v1/users/@sk_a:b", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status == 200
        response = await client.get("/_matrix/app/v1/users/@other:b", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status == 404
        assert calls == []
    finally:
        await client.close()
