"""Read receipts: one in flight per room; the newest asked for meanwhile goes out after it."""
from __future__ import annotations

import asyncio

from bridge.puppet import Puppet


class SlowHomeserver:
    """Stands in for the client's raw(): records each receipt, answers when released."""

    def __init__(self):
        self.sent: list[str] = []
        self.release = asyncio.Event()

    async def raw(self, method, path, body=None, **kwargs):
        self.sent.append(path.rsplit("/", 1)[1])
        await self.release.wait()
        return 200, {}


def puppet_with(homeserver: SlowHomeserver) -> Puppet:
    puppet = Puppet("@sk_alice:hs", "Alice", "http://hs", "token", session=None, agent="alice")
    puppet.client.raw = homeserver.raw
    return puppet


async def test_receipts_asked_while_one_is_in_flight_collapse_to_the_newest():
    homeserver = SlowHomeserver()
    puppet = puppet_with(homeserver)
    first = asyncio.create_task(puppet.read_up_to("!room:hs", "e1"))
    await asyncio.sleep(0)
    later = [asyncio.create_task(puppet.read_up_to("!room:hs", f"e{i}")) for i in (2, 3, 4)]
    await asyncio.gather(*later)  # they only leave their event and return
    assert homeserver.sent == ["e1"]
    homeserver.release.set()
    await first
    assert homeserver.sent == ["e1", "e4"]  # e2 and e3 are covered by e4
    await puppet.read_up_to("!room:hs", "e5")  # nothing in flight: sent at once
    assert homeserver.sent[-1] == "e5"


async def test_rooms_do_not_wait_for_each_other():
    homeserver = SlowHomeserver()
    puppet = puppet_with(homeserver)
    one = asyncio.create_task(puppet.read_up_to("!one:hs", "e1"))
    two = asyncio.create_task(puppet.read_up_to("!two:hs", "e2"))
    await asyncio.sleep(0)
    assert sorted(homeserver.sent) == ["e1", "e2"]
    homeserver.release.set()
    await asyncio.gather(one, two)


async def test_a_failed_receipt_does_not_block_the_next():
    puppet = Puppet("@sk_alice:hs", "Alice", "http://hs", "token", session=None, agent="alice")
    calls = []

    async def refused(method, path, body=None, **kwargs):
        calls.append(path)
        return 403, {"error": "no"}

    puppet.client.raw = refused
    await puppet.read_up_to("!room:hs", "e1")
    await puppet.read_up_to("!room:hs", "e2")
    assert len(calls) == 2
