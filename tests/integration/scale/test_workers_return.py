"""The bridge or Synapse's main process gone and back on Synapse with workers (docs/outages.md
"Synapse with workers").

- A bridge stopped while the owner writes, then started again after the appservice sender has
  backed off on it for long (its next retry further away than the test waits): the bridge's
  start-up ping reaches the sender (nginx routes it there, deploy/workers/nginx_conf.py), which
  retries at once, and the backlog is answered once. To bring the sender's backoff to 256 s in
  seconds rather than the ~4 minutes of failures it takes, a stand-in listens where the bridge
  was: it answers the sender's pings and refuses its transactions, and the test pings the sender
  directly, each ping a failed retry that doubles the backoff (Synapse's own mechanism).
- The main process killed -9 while the bridge sends nothing: the bridge's idle ask
  (bridge/matrix/reachability.py) sees it gone, and once it is back the bridge reads its
  channels back — a message the homeserver never handed on is answered, once, and a message
  written right after the return is answered once.
"""

from __future__ import annotations

import uuid

import aiohttp
import pytest
from aiohttp import web
from bridge_harness import agent, answers_in, wait_until
from helpers import ALICE, BOB, lost_on_the_way, open_dm, prompts, say, two_echo_agents
from invariants import edits_after_final
from matrix_helpers import PATIENCE, caught_up, events_in, sync_until
from synapse_workers import SENDER

pytestmark = pytest.mark.scale


def bodies(owner, room_id: str, puppet: str) -> list[str]:
    return [a["body"] for a in answers_in(events_in(owner, room_id), puppet)]


def once_each(owner, running, room_id: str, puppet: str, log, said: list[str]) -> None:
    """Each of `said` read by the agent once and answered once (echoed), in order; no finished
    answer edited; the store holding each message and answer once."""
    assert [p.splitlines()[-1] for p in prompts(log)] == said, prompts(log)
    assert bodies(owner, room_id, puppet) == [f"echo: {text}" for text in said]
    assert edits_after_final(events_in(owner, room_id), puppet) == []
    stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
    assert [m.text for m in stored if m.role == "user"] == said
    assert [m.text for m in stored if m.role == "agent"] == [f"echo: {text}" for text in said]


async def stand_in(host: str, port: int) -> web.AppRunner:
    """Where the stopped bridge listened: answers pings, refuses every transaction (503)."""

    async def ping(request: web.Request) -> web.Response:
        return web.json_response({})

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"errcode": "M_UNKNOWN", "error": "not now"}, status=503)

    app = web.Application()
    app.router.add_post("/_matrix/app/v1/ping", ping)
    app.router.add_put("/_matrix/app/v1/transactions/{txn}", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    return runner


async def back_off(workers, service: str, as_token: str, longer_than: float) -> None:
    """Ping the sender itself (its client listener) until its next retry of `service` is more
    than `longer_than` s away: each ping answered by the stand-in makes the sender retry at once,
    the stand-in refuses, and the sender doubles its delay. One ping at a time, each after the
    sender scheduled the retry the last one caused."""
    url = f"http://127.0.0.1:{workers.ports[SENDER]}/_matrix/client/v1/appservice/{service}/ping"
    headers = {"Authorization": f"Bearer {as_token}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        while not workers.retries_scheduled(service) or workers.retries_scheduled(service)[-1] <= longer_than:
            scheduled = len(workers.retries_scheduled(service))
            # 502 when the sender's own retry is running at that moment: it schedules the next one
            async with http.post(url, json={"transaction_id": uuid.uuid4().hex}) as response:
                await response.read()
            await wait_until(
                lambda n=scheduled: len(workers.retries_scheduled(service)) > n, 60, "the sender scheduled its retry"
            )


async def test_a_bridge_restarted_while_the_sender_backs_off_is_sent_its_backlog_at_once(
    homeserver, bridge_factory, owner, tmp_path
):
    workers = homeserver.workers
    log, folder = tmp_path / "alice.jsonl", tmp_path / "bridge"
    agents = {"alice": agent("--log", str(log), "--echo-last-line")}
    running = await bridge_factory(agents, folder=folder)
    service, as_token = running.bridge.registration.id, running.bridge.registration.as_token
    host, port = running.config.listen_host, running.config.listen_port
    room_id = await open_dm(owner, ALICE)
    await say(owner, room_id, "before")
    await sync_until(owner, lambda: bodies(owner, room_id, ALICE) == ["echo: before"])
    await running.idle()
    await running.stop()

    failed = len(workers.retries_scheduled(service))
    backlog = await say(owner, room_id, "while it was stopped")
    await wait_until(lambda: workers.taken_for_appservices(backlog), 60, "the sender took the message")
    await wait_until(lambda: len(workers.retries_scheduled(service)) > failed, 60, "the sender failed to send")
    standing_in = await stand_in(host, port)
    try:
        # the sender's next retry comes after anything this test waits for
        await back_off(workers, service, as_token, longer_than=2 * PATIENCE)
    finally:
        await standing_in.cleanup()
    assert bodies(owner, room_id, ALICE) == ["echo: before"]

    # started again (no probe: the backlog is what this test waits for)
    running = await bridge_factory(agents, folder=folder, probe=False)
    await sync_until(
        owner, lambda: bodies(owner, room_id, ALICE) == ["echo: before", "echo: while it was stopped"], PATIENCE
    )
    await running.idle()
    await caught_up(owner, room_id)
    assert running.deliveries.times[backlog] == 1
    once_each(owner, running, room_id, ALICE, log, ["before", "while it was stopped"])


async def test_the_main_process_killed_while_the_bridge_is_idle_is_noticed_and_read_back(
    homeserver, bridge_factory, owner, tmp_path, monkeypatch
):
    from bridge.matrix import presence, reachability

    monkeypatch.setattr(reachability, "IDLE_PING", 1.0)  # asked after 1 s of quiet, not 15
    monkeypatch.setattr(presence, "REFRESH", 3600.0)  # nothing else asks it while idle
    workers = homeserver.workers
    running, logs = await two_echo_agents(bridge_factory, tmp_path)
    lost_room, after_room = await open_dm(owner, ALICE), await open_dm(owner, BOB)
    # a message the homeserver never hands on (as a killed process can lose what it queued)
    await lost_on_the_way(running, owner, lost_room, ALICE, "lost on the way")
    await running.idle()
    reach = running.bridge.reachability
    await wait_until(lambda: reach.away_since is None, PATIENCE, "the homeserver answers the bridge")

    workers.kill("main")  # nothing is being sent: no answer streams, nobody writes
    try:
        await wait_until(lambda: reach.away_since is not None, PATIENCE, "the bridge noticed the main process gone")
    finally:
        await workers.start_process("main")
    await wait_until(lambda: reach.away_since is None, PATIENCE, "the bridge saw the main process back")
    await say(owner, after_room, "right after")

    await sync_until(
        owner,
        lambda: (
            bodies(owner, lost_room, ALICE) == ["echo: lost on the way"]
            and bodies(owner, after_room, BOB) == ["echo: right after"]
        ),
        PATIENCE,
    )
    await running.idle()
    await wait_until(lambda: not running.bridge._catching_up, PATIENCE, "the read-back done")
    for room_id in (lost_room, after_room):
        await caught_up(owner, room_id)
    once_each(owner, running, lost_room, ALICE, logs[ALICE], ["lost on the way"])
    once_each(owner, running, after_room, BOB, logs[BOB], ["right after"])
