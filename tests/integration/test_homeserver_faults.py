"""The homeserver goes away and comes back (SPEC §11, issue 8).

These tests stop and start Synapse, so they use a private one, not the session's.
"""
from __future__ import annotations

import asyncio
import json
import time

import nio
import pytest

from bridge_harness import agent, answers_in, start_bridge
from matrix_helpers import events_in, login, private_homeserver, sync_until


@pytest.fixture
async def private_hs(tmp_path):
    async with private_homeserver(tmp_path / "hs") as hs:
        yield hs


async def open_dm(owner, puppet_id):
    room_id = (await owner.room_create(is_direct=True, invite=[puppet_id],
                                       preset=nio.RoomPreset.trusted_private_chat)).room_id
    await sync_until(owner, lambda: any(
        e.get("type") == "m.room.member" and e.get("state_key") == puppet_id
        and e["content"].get("membership") == "join" for e in events_in(owner, room_id)))
    return room_id


def prompts(log_path):
    return [m for m in map(json.loads, log_path.read_text().splitlines()) if m.get("method") == "session/prompt"]


async def test_answer_survives_a_homeserver_restart_and_nothing_is_sent_twice(private_hs, tmp_path):
    hs = private_hs
    log = tmp_path / "alice.log"
    running = await start_bridge(hs, tmp_path / "bridge", {"alice": agent("--log", str(log))})
    owner = await login(hs, hs.owner_id, hs.owner_password)
    try:
        puppet_id = "@sk_alice:localhost"
        room_id = await open_dm(owner, puppet_id)
        # 20 chunks, 0.2 s apart: Synapse is down for part of the answer
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": "[[slow]] go"})
        await sync_until(owner, lambda: any(a["edits"] >= 1 for a in answers_in(events_in(owner, room_id), puppet_id)))
        await owner.close()
        await hs.server.stop()
        await asyncio.sleep(2)
        await hs.server.start()
        owner = await login(hs, hs.owner_id, hs.owner_password)

        def finished():
            answers = answers_in(events_in(owner, room_id), puppet_id)
            return answers and not answers[-1]["body"].startswith(("✍️", "💭", "⏳"))
        await sync_until(owner, finished, timeout=60)
        answers = answers_in(events_in(owner, room_id), puppet_id)
        assert len(answers) == 1, [a["body"] for a in answers]  # one message, never posted twice
        channel = running.store.channel_by_room(room_id)
        stored = running.store.last_messages(channel.id, 10)
        assert [m.role for m in stored] == ["user", "agent"]
        assert stored[1].text == answers[0]["body"]
        assert len(prompts(log)) == 1
    finally:
        await owner.close()
        await running.stop()


async def test_backlog_is_delivered_at_once_when_the_bridge_starts(private_hs, tmp_path):
    hs = private_hs
    folder = tmp_path / "bridge"
    running = await start_bridge(hs, folder, {"alice": agent()})
    owner = await login(hs, hs.owner_id, hs.owner_password)
    try:
        puppet_id = "@sk_alice:localhost"
        room_id = await open_dm(owner, puppet_id)
        await running.stop()
        for n in range(3):  # the homeserver cannot deliver these: it backs off
            await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": f"while down {n}"})
        # Synapse retries 2, 6, 14 and 30 s after the first failure: at 20 s its next try is 10 s
        # away (a start right at a retry also meets Synapse's "AlreadyCalled" answer to the ping)
        await asyncio.sleep(20)
        started = time.monotonic()
        running = await start_bridge(hs, folder, {"alice": agent()})

        def all_answered():
            bodies = [a["body"] for a in answers_in(events_in(owner, room_id), puppet_id)]
            return all(any(f"while down {n}" in b for b in bodies) for n in range(3))
        await sync_until(owner, all_answered, timeout=30)
        # the start-up ping made Synapse retry now, not at its next back-off step
        assert time.monotonic() - started < 8
        bodies = [a["body"] for a in answers_in(events_in(owner, room_id), puppet_id)]
        assert len(bodies) == 3  # each once
    finally:
        await owner.close()
        await running.stop()
