"""After refusing a transaction for a gap, the bridge pings the homeserver until a transaction
comes (bridge.py `_retry_soon`): a ping made before the homeserver started its recovery finds
nothing to hurry, and Synapse 1.163 was seen never running the retry it had scheduled."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from bridge import bridge as bridge_module
from bridge.bridge import Bridge
from bridge.matrix.quiet import QUIET, Quiet


def pinging(monkeypatch):
    monkeypatch.setattr(bridge_module, "GAP_RETRY_AFTER", (0.01,) * 6)
    bridge = Bridge.__new__(Bridge)  # only what the pings use
    bridge._gap_pings = set()
    bridge.server = SimpleNamespace(acknowledged=0)
    pings = []

    async def ping():
        pings.append(bridge.server.acknowledged)
        if len(pings) == 3:  # the third ping is the one the homeserver acts on
            bridge.server.acknowledged += 1

    bridge._ping = ping
    return bridge, pings


async def test_the_homeserver_is_pinged_again_until_a_transaction_comes(monkeypatch):
    bridge, pings = pinging(monkeypatch)
    bridge._retry_soon()
    bridge._retry_soon()  # a second refusal meanwhile: the same pings go on, no second round
    await asyncio.gather(*bridge._gap_pings)
    assert pings == [0, 0, 0]  # and none after the homeserver sent again


async def test_the_pings_stop_after_the_last_delay(monkeypatch):
    bridge, pings = pinging(monkeypatch)
    bridge._ping = lambda: pings.append("ping") or asyncio.sleep(0)  # the homeserver never sends
    bridge._retry_soon()
    await asyncio.gather(*bridge._gap_pings)
    assert pings == ["ping"] * 6


async def test_a_refused_transactions_rooms_are_read_back_if_it_never_comes_again(monkeypatch):
    # seen in the latency bench after a restart: the refused transaction was not sent again
    # for longer than the bench waited; its rooms are active, so the quiet watch reads them back
    bridge, _pings = pinging(monkeypatch)
    bridge._ping = lambda: asyncio.sleep(0)
    bridge.quiet = Quiet()
    bridge._quiet_news = asyncio.Event()
    bridge.config = SimpleNamespace(owners={"@owner:localhost"})
    bridge.channels = SimpleNamespace(portals={})
    refused = SimpleNamespace(
        events=[
            {"room_id": "!dm:localhost", "sender": "@owner:localhost", "type": "m.room.message"},
            {"room_id": "!elsewhere:localhost", "sender": "@someone:localhost", "type": "m.room.message"},
        ]
    )
    bridge._retry_soon(refused)
    await asyncio.gather(*bridge._gap_pings)
    assert set(bridge.quiet.active) == {"!dm:localhost"} and bridge._quiet_news.is_set()
    now = bridge.quiet.last_transaction
    assert bridge.quiet.next_check(now) == QUIET  # read back once the homeserver is quiet
    assert set(bridge.quiet.due(now + QUIET)) == {"!dm:localhost"}
