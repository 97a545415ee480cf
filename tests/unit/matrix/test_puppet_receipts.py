"""Read receipts: the newest of a room's receipts asked for close together goes out, once."""

from __future__ import annotations

import asyncio

from bridge.matrix import intent as intent_module
from bridge.matrix.puppet import Puppet


class SlowHomeserver:
    """Stands in for the client's raw(): records each receipt, answers when released."""

    def __init__(self, released: bool = False):
        self.sent: list[str] = []
        self.release = asyncio.Event()
        if released:
            self.release.set()

    async def raw(self, method, path, body=None, **kwargs):
        self.sent.append(path.rsplit("/", 1)[1])
        await self.release.wait()
        return 200, {}


def puppet_with(homeserver: SlowHomeserver, monkeypatch, delay: float = 0.05) -> Puppet:
    monkeypatch.setattr(intent_module, "RECEIPT_DELAY", delay)
    puppet = Puppet("@sk_alice:hs", "Alice", "http://hs", "token", session=None, agent="alice")
    puppet.intent.client.raw = homeserver.raw
    return puppet


async def test_receipts_asked_close_together_send_only_the_newest(monkeypatch):
    homeserver = SlowHomeserver(released=True)
    puppet = puppet_with(homeserver, monkeypatch)
    first = asyncio.create_task(puppet.intent.read_up_to("!room:hs", "e1"))
    await asyncio.sleep(0)
    for i in (2, 3):
        await puppet.intent.read_up_to("!room:hs", f"e{i}")  # they only move the mark and return
    assert homeserver.sent == []
    await first
    assert homeserver.sent == ["e3"]  # e1 and e2 are covered by e3
    await puppet.intent.read_up_to("!room:hs", "e4")  # later on its own: sent on its own
    assert homeserver.sent == ["e3", "e4"]


async def test_a_receipt_asked_while_one_is_in_flight_follows_it(monkeypatch):
    homeserver = SlowHomeserver()
    puppet = puppet_with(homeserver, monkeypatch, delay=0.01)
    first = asyncio.create_task(puppet.intent.read_up_to("!room:hs", "e1"))
    while not homeserver.sent:
        await asyncio.sleep(0.005)
    await puppet.intent.read_up_to("!room:hs", "e2")
    await puppet.intent.read_up_to("!room:hs", "e3")
    assert homeserver.sent == ["e1"]
    homeserver.release.set()
    await first
    assert homeserver.sent == ["e1", "e3"]


async def test_rooms_do_not_wait_for_each_other(monkeypatch):
    homeserver = SlowHomeserver(released=True)
    puppet = puppet_with(homeserver, monkeypatch)
    await asyncio.gather(puppet.intent.read_up_to("!one:hs", "e1"), puppet.intent.read_up_to("!two:hs", "e2"))
    assert sorted(homeserver.sent) == ["e1", "e2"]


async def test_a_refused_receipt_does_not_stop_the_next(monkeypatch):
    monkeypatch.setattr(intent_module, "RECEIPT_DELAY", 0.01)
    puppet = Puppet("@sk_alice:hs", "Alice", "http://hs", "token", session=None, agent="alice")
    calls = []

    async def refused(method, path, body=None, **kwargs):
        calls.append(path)
        return 403, {"error": "no"}

    puppet.intent.client.raw = refused
    await puppet.intent.read_up_to("!room:hs", "e1")
    await puppet.intent.read_up_to("!room:hs", "e2")
    assert len(calls) == 2
