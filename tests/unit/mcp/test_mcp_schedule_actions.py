"""The schedule tools (bridge/mcp/actions.py) on a real store: an agent's cron waits for the
owner's approval, a single run is handed to the scheduler to post, and an agent sees and cancels
only its own schedules (docs/SECURITY.md, "Scheduled work")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bridge.mcp import actions
from bridge.mcp.actions import Means, Refused, Scope
from store import Store
from store.offloop import OffLoop


@pytest.fixture
def world():
    store = Store.open(":memory:")
    channel = store.create_channel("!r:hs", "general")
    bells: list[tuple] = []
    means = Means(
        OffLoop(store),
        SimpleNamespace(schedules_per_conversation=5),
        SimpleNamespace(),
        lambda *args, **kw: bells.append(args),
    )
    yield store, channel, means, bells
    store.close()


async def test_a_cron_waits_for_the_owner_and_a_single_run_is_posted(world):
    store, channel, means, bells = world
    alice = Scope(channel.id, "!r:hs", "", "alice")
    said = await actions.schedule(means, alice, "tick", cron="* * * * *")
    assert said.startswith("Schedule id 1 (on cron * * * * *) waits for the owner's approval")
    (made,) = store.schedules.listed(channel.id)
    assert made.state == "waiting" and store.schedules.due(10**15) == []
    once = await actions.schedule(means, alice, "lunch", in_seconds=60)
    assert once.startswith("Scheduled as id 2: next at") and "!unschedule 2" in once
    assert [b[0].number for b in bells] == [1, 2]  # the scheduler asks about 1, posts 2
    listed = await actions.schedules(means, alice)
    assert "id 1 (waiting for the owner's approval" in listed and "id 2 (next at" in listed


async def test_a_declined_schedule_is_said_once_in_the_agents_list(world):
    store, channel, means, _ = world
    alice = Scope(channel.id, "!r:hs", "", "alice")
    await actions.schedule(means, alice, "tick", cron="* * * * *")
    (made,) = store.schedules.waiting()
    store.schedules.decide(made.id, False, None, at=1)
    assert (await actions.schedules(means, alice)).startswith("id 1 (declined by the owner")
    assert await actions.schedules(means, alice) == "You have nothing scheduled in this conversation."


async def test_an_agent_sees_and_cancels_only_its_own(world):
    store, channel, means, bells = world
    alice, bob = (Scope(channel.id, "!r:hs", "", name) for name in ("alice", "bob"))
    await actions.schedule(means, alice, "alice's", in_seconds=60)
    await actions.schedule(means, bob, "bob's", in_seconds=60)
    assert "bob's" not in await actions.schedules(means, alice)
    with pytest.raises(Refused, match="^schedule 2 is another agent's: you see and cancel only your own"):
        await actions.cancel_schedule(means, alice, 2)
    assert [s.prompt for s in store.schedules.listed(channel.id)] == ["alice's", "bob's"]
    with pytest.raises(Refused, match="you have no schedule 9"):
        await actions.cancel_schedule(means, alice, 9)
    assert (await actions.cancel_schedule(means, bob, 2)) == "Cancelled schedule 2: bob's"
    assert bells[-1][1] == store.schedules.get(bells[1][0].id).id  # the scheduler ends its ask, if any
