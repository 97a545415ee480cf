"""A transaction the homeserver leaves behind, on the real bridge and the shared Synapse
(docs/reliability.md "Restarts": transaction order).

Synapse can store a transaction unsent at the end of a recovery and send it only at its next
failure, while the ones after it go out at once. The bridge's check refuses the first one after a
gap only while armed (at a start, after a refusal); once a refused transaction came again it is
disarmed — but that refusal made Synapse recover, and the end of that recovery can leave one
behind in turn. That is test_kill9's "out of order": msg 33 answered before msg 32 across a
restart, a transaction refused as out of sequence just before. Here the homeserver's side is
forced: the transaction carrying msg 32 is acknowledged to Synapse without reaching the bridge
(left behind), msg 33 comes after the gap, and msg 32's transaction is handed over later. In a
busy room (under load, test_kill9 fills a page of 50 events in seconds with answers and their
edits) msg 32 lies pages back when msg 33 comes: the read-back goes on page after page.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from bridge_harness import agent, answers_in, probe_delivery
from helpers import ALICE, is_final, open_dm, prompts, say
from matrix_helpers import events_in, sync_until

from bridge.matrix.appservice import Transaction


def carries(transaction: Transaction, test: Callable[[dict], bool]) -> bool:
    return any(test(event) for event in transaction.events)


def body(event: dict) -> str:
    return (event.get("content") or {}).get("body", "")


async def puppet_events(hs_url: str, as_token: str, room_id: str, count: int) -> None:
    """`count` events of the puppet's in the room (no owner's: none reads the room back), as a
    busy room's answers and edits would fill it."""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {as_token}"}) as http:
        for n in range(count):
            url = f"{hs_url}/_matrix/client/v3/rooms/{quote(room_id, safe='')}/send/org.sidekicks.test.filler/f{n}"
            async with http.put(url, params={"user_id": ALICE}, json={"n": n}) as response:
                assert response.status == 200, await response.text()


@pytest.mark.parametrize("between", [0, 120], ids=["next", "pages-back"])
async def test_a_message_left_behind_after_a_gap_is_answered_before_the_next_one(
    homeserver, bridge_factory, owner, tmp_path, between
):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log), "--echo-last-line")})
    server, token = running.bridge.server, running.bridge.registration.as_token
    room_id = await open_dm(owner, ALICE)
    answer = server._answer
    held: list[tuple] = []  # transactions Synapse keeps unsent (acknowledged here, never handled)
    leave_behind: list[Callable[[Transaction], bool]] = [lambda transaction: False]

    async def homeserver_side(txn_id: str, transaction: Transaction, key: str) -> web.Response:
        if leave_behind[0](transaction):
            held.append((txn_id, transaction, key))
            return web.json_response({})
        return await answer(txn_id, transaction, key)

    server._answer = homeserver_side
    try:
        # as in test_kill9 after a start: a transaction whose number the bridge never saw (there:
        # lost to the kill), then one after the gap, refused once and let through when it comes again
        leave_behind[0] = lambda txn: carries(txn, lambda e: e.get("type") == "org.sidekicks.test.probe")
        await probe_delivery(homeserver.url, token, running)
        leave_behind[0] = lambda transaction: False
        await probe_delivery(homeserver.url, token, running)
        assert not server._order.armed  # disarmed: the next gap is let through

        # the recovery that refusal started leaves msg 32 behind; msg 33 goes out at once
        leave_behind[0] = lambda transaction: carries(transaction, lambda e: body(e) == "msg 32")
        first = await say(owner, room_id, "msg 32")
        await running.deliveries.wait(first)  # Synapse is done with it: stored unsent
        leave_behind[0] = lambda transaction: False
        # the first one after the gap holds nothing of the owner's (there, say, a receipt); the
        # next, msg 33, comes in order after it
        await probe_delivery(homeserver.url, token, running)
        await puppet_events(homeserver.url, token, room_id, between)
        await say(owner, room_id, "msg 33")

        def answered() -> bool:
            done = [a for a in answers_in(events_in(owner, room_id), ALICE) if is_final(a)]
            return any(a["body"] == "echo: msg 33" for a in done)

        await sync_until(owner, answered)
        await running.idle()
        bodies = [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)]
        assert bodies == ["echo: msg 32", "echo: msg 33"], bodies  # each in its place

        # Synapse's next failure: the recovery sends the one it kept; its message is handled already
        (txn_id, transaction, key) = held[-1]
        assert (await answer(txn_id, transaction, key)).status == 200  # what it starts is queued now
        await running.idle()
        marker = (await owner.room_send(room_id, "org.sidekicks.test.marker", {})).event_id
        await sync_until(owner, lambda: any(e["event_id"] == marker for e in events_in(owner, room_id)))
        bodies = [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)]
        assert bodies == ["echo: msg 32", "echo: msg 33"], bodies
        asked = [text.splitlines()[-1] for text in prompts(log)]
        assert asked.count("msg 32") == 1 and asked.count("msg 33") == 1, asked
    finally:
        server._answer = answer
