"""The homeserver goes away and comes back (docs/reliability.md "The homeserver away").

These tests stop and start Synapse, so they use a private one, not the session's.
"""

from __future__ import annotations

import time

from aiohttp import web
from bridge_harness import agent, answers_in, start_bridge, wait_until
from helpers import away_while_the_answer_ends, open_dm, received
from matrix_helpers import events_in, login, record_figures, sync_until


def prompts(log_path):
    return [m for m in received(log_path) if m.get("method") == "session/prompt"]


async def test_answer_survives_a_homeserver_restart_and_nothing_is_sent_twice(private_hs, tmp_path):
    hs = private_hs
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await start_bridge(hs, tmp_path / "bridge", {"alice": agent("--log", str(log))})
    owner = await login(hs, hs.owner_id, hs.owner_password)
    try:
        puppet_id = "@sk_alice:localhost"
        room_id = await open_dm(owner, puppet_id)
        # the answer streams its first part, then waits for `release`: the rest of it, and its
        # end, happen while Synapse is down
        await owner.room_send(
            room_id, "m.room.message", {"msgtype": "m.text", "body": f"[[chunks:4]] [[hold:{release}]] go on"}
        )
        await sync_until(owner, lambda: any(a["edits"] >= 1 for a in answers_in(events_in(owner, room_id), puppet_id)))
        owner = await away_while_the_answer_ends(hs, owner, log, release, kill=False)

        def finished():
            answers = answers_in(events_in(owner, room_id), puppet_id)
            return answers and not answers[-1]["body"].startswith(("✍️", "💭", "⏳"))

        await sync_until(owner, finished)
        await running.idle()
        answers = answers_in(events_in(owner, room_id), puppet_id)
        assert len(answers) == 1, [a["body"] for a in answers]  # one message, never posted twice
        assert answers[0]["body"].startswith("echo: ") and answers[0]["body"].endswith("go on")
        channel = running.store.channel_by_room(room_id)
        stored = running.store.last_messages(channel.id, 10)
        assert [m.role for m in stored] == ["user", "agent"]
        assert stored[1].text == answers[0]["body"]
        assert len(prompts(log)) == 1
    finally:
        release.touch()
        await owner.close()
        await running.stop()


class Refuser:
    """Stands on the bridge's port while it is down: refuses every transaction (503) and notes
    when Synapse tried, which shows Synapse's own retry schedule (2, 4, 8, 16 s … apart)."""

    def __init__(self) -> None:
        self.knocks: list[float] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.refuse)
        self._runner = web.AppRunner(app, access_log=None)

    async def refuse(self, request: web.Request) -> web.Response:
        if "/transactions/" in request.path:
            self.knocks.append(time.monotonic())
        return web.json_response({"errcode": "M_UNKNOWN", "error": "down"}, status=503)

    async def start(self, port: int) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True).start()

    async def stop(self) -> None:
        await self._runner.cleanup()


async def test_backlog_is_delivered_at_once_when_the_bridge_starts(private_hs, tmp_path):
    hs = private_hs
    folder = tmp_path / "bridge"
    running = await start_bridge(hs, folder, {"alice": agent()})
    owner = await login(hs, hs.owner_id, hs.owner_password)
    refuser = None
    try:
        puppet_id = "@sk_alice:localhost"
        room_id = await open_dm(owner, puppet_id)
        await running.stop()
        refuser = Refuser()
        await refuser.start(hs.as_port)
        sent = []
        for n in range(3):  # the homeserver cannot deliver these: it backs off
            response = await owner.room_send(
                room_id, "m.room.message", {"msgtype": "m.text", "body": f"while down {n}"}
            )
            sent.append(response.event_id)
        # the first try and three retries (0, 2, 6, 14 s): Synapse's next retry is 16 s away
        await wait_until(
            lambda: len(refuser.knocks) >= 4, timeout=120, what="Synapse tried four times to deliver the backlog"
        )
        knocks = list(refuser.knocks)
        await refuser.stop()
        refuser = None
        # after its n-th failed try Synapse waits 2**n s (synapse/appservice/scheduler.py)
        next_retry = knocks[-1] + 2 ** len(knocks)

        # probe=False: the probe would itself be delivered only with the backlog; what is tested
        # here is the bridge's own start-up ping
        started = time.monotonic()
        running = await start_bridge(hs, folder, {"alice": agent()}, probe=False)
        ready = time.monotonic()
        await running.handled(sent[-1])
        delivered = running.deliveries.when[sent[0]]
        assert ready < next_retry - 1, (
            f"the bridge took {ready - started:.1f} s to start, past Synapse's "
            "next retry: this run cannot tell the ping from the retry"
        )
        # the start-up ping made Synapse retry now, not at its next back-off step (1 s of slack:
        # the retry's own timer starts a little after the refused try that this test saw)
        assert delivered < next_retry - 1, (delivered - ready, next_retry - ready)
        record_figures(
            "backlog after a restart",
            {
                "Synapse's next retry after the start": f"{next_retry - ready:.1f} s",
                "backlog delivered after the start": f"{delivered - ready:.2f} s",
            },
        )

        def all_answered():
            bodies = [a["body"] for a in answers_in(events_in(owner, room_id), puppet_id)]
            return all(any(f"while down {n}" in b for b in bodies) for n in range(3))

        await sync_until(owner, all_answered)
        await running.idle()
        bodies = [a["body"] for a in answers_in(events_in(owner, room_id), puppet_id)]
        assert len(bodies) == 3  # each once
    finally:
        if refuser is not None:
            await refuser.stop()
        await owner.close()
        await running.stop()
