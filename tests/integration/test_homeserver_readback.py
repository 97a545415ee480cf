"""The bridge reads back what the homeserver may have lost (bridge/matrix/reachability.py,
docs/outages.md): an event that comes both ways at once runs once; a homeserver that goes away
while the bridge sends it nothing is noticed, and what it missed is read back once it returns.
"""

from __future__ import annotations

import asyncio

from bridge_harness import agent, answers_in, start_bridge, wait_until
from helpers import lost_on_the_way, open_dm, prompts, say
from matrix_helpers import events_in, login, sync_until

ALICE = "@sk_alice:localhost"


def replies_after(owner, room_id: str, event_id: str) -> int:
    """Messages of the bridge (anyone but the owner) after `event_id`, up to the owner's next one."""
    events = [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and "m.new_content" not in (e.get("content") or {})
    ]
    at = next((i for i, e in enumerate(events) if e["event_id"] == event_id), None)
    if at is None:  # not seen yet
        return 0
    count = 0
    for event in events[at + 1 :]:
        if event.get("sender") == owner.user_id:
            break
        count += 1
    return count


async def test_a_command_read_back_while_its_transaction_is_handled_runs_once(homeserver, tmp_path):
    """`!help` is being handled from its transaction when the bridge reads the channel back (the
    homeserver answered again after failing: what reachability.py reports on a refused
    connection and its end): the read-back meets the same event while it runs, waits for it,
    and finds it handled — the command runs once, its reply is posted once."""
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    bridge = running.bridge
    commands = bridge.inbound.commands
    real_handle, gate = commands.handle, asyncio.Event()
    handled: list[str] = []
    dispatched: list[str] = []
    real_event = bridge.dispatcher.event

    async def handle(event, room_id, sender, body):
        handled.append(event["event_id"])
        if len(handled) == 1:
            await gate.wait()  # still running when the same event comes the other way
        return await real_handle(event, room_id, sender, body)

    async def event(ev):
        dispatched.append(ev.get("event_id"))
        return await real_event(ev)

    try:
        room_id = await open_dm(owner, ALICE)
        first = await say(owner, room_id, "!help")  # how many replies one run makes
        await sync_until(owner, lambda: replies_after(owner, room_id, first) > 0)
        await running.idle()
        once = replies_after(owner, room_id, first)

        commands.handle, bridge.dispatcher.event = handle, event
        raced = await say(owner, room_id, "!help")
        await wait_until(lambda: handled == [raced], what="the command handled from its transaction")
        bridge.reachability.failed()  # the homeserver away, and answering again: a read-back
        bridge.reachability.answered()
        await wait_until(lambda: dispatched.count(raced) >= 2, what="the command read back meanwhile")
        gate.set()
        await wait_until(lambda: not bridge._catching_up, what="the read-back done")
        await sync_until(owner, lambda: replies_after(owner, room_id, raced) >= once)
        third = await say(owner, room_id, "!help")  # after every reply to the raced one
        await sync_until(owner, lambda: replies_after(owner, room_id, third) >= once)
        assert handled.count(raced) == 1, handled
        assert replies_after(owner, room_id, raced) == once
    finally:
        gate.set()
        commands.handle = real_handle
        bridge.dispatcher.event = real_event
        await owner.close()
        await running.stop()


async def test_a_homeserver_killed_while_the_bridge_is_idle_is_noticed_and_read_back(private_hs, tmp_path, monkeypatch):
    """Synapse killed (-9) and started again while the bridge sends it nothing: the bridge asks
    it now and then (reachability.py `watch`), so it sees it gone, and once it answers again the
    bridge reads its channels back — a message the homeserver never handed on (its transaction
    dropped here, acknowledged, as a killed Synapse can lose the events it had queued) is
    answered, once."""
    from bridge.matrix import presence, reachability

    monkeypatch.setattr(reachability, "IDLE_PING", 1.0)  # asked after 1 s of quiet, not 15
    # no presence kept up either (as with a homeserver that has presence off, where the bridge
    # sends none): nothing else asks the homeserver while the bridge is idle
    monkeypatch.setattr(presence, "REFRESH", 3600.0)
    hs = private_hs
    log = tmp_path / "alice.log"
    running = await start_bridge(hs, tmp_path / "bridge", {"alice": agent("--log", str(log))})
    owner = await login(hs, hs.owner_id, hs.owner_password)
    try:
        room_id = await open_dm(owner, ALICE)
        await lost_on_the_way(running, owner, room_id, ALICE, "lost on the way")
        await owner.close()
        await running.idle()
        assert running.bridge.reachability.away_since is None
        hs.server.kill()  # nothing is being sent: no answer streams, nobody writes
        await wait_until(
            lambda: running.bridge.reachability.away_since is not None, what="the bridge noticed the homeserver gone"
        )
        await hs.server.start()
        owner = await login(hs, hs.owner_id, hs.owner_password)

        def answers() -> list[str]:
            return [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)]

        await sync_until(owner, lambda: "echo: lost on the way" in answers())
        await running.idle()
        await wait_until(lambda: not running.bridge._catching_up, what="the read-back done")
        assert [p.splitlines()[-1] for p in prompts(log)] == ["lost on the way"]
        assert answers().count("echo: lost on the way") == 1
    finally:
        await owner.close()
        await running.stop()
