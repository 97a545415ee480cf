"""A part of Synapse with workers goes away and comes back (docs/outages.md "Synapse with workers").

Faults: Redis killed and started again, Synapse's PostgreSQL stopped (`pg_ctl stop -m fast`) and
started, the generic worker (every client request goes through it) and the event persister (every
event is written by it) killed -9 and started again, each while an answer streams in one DM and
another streams in a second DM; and the appservice sender
killed -9 while the bridge handles a transaction it sent, with the owner's next message queued
in it.

Afterwards the exactly-once invariants of the restart tests hold: each prompt reached its agent
once, each message is answered once (shown interrupted: never, the bridge did not stop), no
finished answer is edited afterwards, and the store keeps each message and each answer once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from bridge_harness import agent, answers_in, wait_until
from helpers import ALICE, BOB, STATUS, open_dm, prompts, say, two_echo_agents
from invariants import edits_after_final, prompts_ended
from matrix_helpers import caught_up, events_in, sync_until
from synapse_workers import PERSISTER, SENDER

pytestmark = pytest.mark.scale


def finished(owner, room_id: str, puppet: str) -> bool:
    answers = answers_in(events_in(owner, room_id), puppet)
    return bool(answers) and all(not a["body"].startswith(STATUS) and "getting ready" not in a["body"] for a in answers)


def proxied_since(hs, offset: int, what: str) -> bool:
    """nginx has logged a request whose line holds `what` since byte `offset` of its access log."""
    log = hs.workers.folder / "nginx" / "access.log"
    with log.open("rb") as handle:
        handle.seek(offset)
        return what.encode() in handle.read()


def access_log_size(hs) -> int:
    log = hs.workers.folder / "nginx" / "access.log"
    return log.stat().st_size if log.exists() else 0


def exactly_once(owner, running, rooms: dict[str, tuple[str, str]], logs: dict[str, Path]) -> None:
    """Each message ("a long one" to alice, "meanwhile" to bob) read by its agent once, answered
    once, never shown interrupted, no finished answer edited, the store holding each once."""
    for puppet, (room_id, said) in rooms.items():
        log = logs[puppet]
        assert [p.splitlines()[-1] for p in prompts(log)] == [said], prompts(log)
        answers = answers_in(events_in(owner, room_id), puppet)
        assert len(answers) == 1, answers
        body = answers[0]["body"]
        assert not body.startswith(STATUS) and "interrupted" not in body, body
        assert edits_after_final(events_in(owner, room_id), puppet) == []
        stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
        assert [m.text for m in stored if m.role == "user"] == [said]
        assert [m.text for m in stored if m.role == "agent"] == [body]


def away(hs, part: str) -> None:
    if part == "postgresql":  # the database every Synapse process shares: pg_ctl stop -m fast
        hs.postgres.shut_down()
    else:
        hs.workers.kill(part)


async def back(hs, part: str) -> None:
    if part == "postgresql":
        if not (hs.postgres.data / "postmaster.pid").exists():
            hs.postgres.start_again()
    else:
        await hs.workers.start_process(part)


@pytest.mark.parametrize("part", ["redis", "generic_worker1", PERSISTER, "postgresql"])
async def test_a_part_killed_and_started_again_mid_answer_loses_and_repeats_nothing(
    part, homeserver, bridge_factory, owner, tmp_path
):
    release = tmp_path / "release"
    logs = {ALICE: tmp_path / "alice.jsonl", BOB: tmp_path / "bob.jsonl"}
    running = await bridge_factory(
        {
            "alice": agent("--log", str(logs[ALICE]), "--answer-size", "2000", "--chunks", "8", "--hold", str(release)),
            "bob": agent("--log", str(logs[BOB]), "--echo-last-line", "--chunks", "2", "--hold", str(release)),
        }
    )
    streaming, other = await open_dm(owner, ALICE), await open_dm(owner, BOB)

    def text_shown(room_id: str, puppet: str) -> bool:
        return any("\n\n" in a["body"] or "echo" in a["body"] for a in answers_in(events_in(owner, room_id), puppet))

    await say(owner, streaming, "a long one")
    await say(owner, other, "meanwhile")
    await sync_until(owner, lambda: text_shown(streaming, ALICE) and text_shown(other, BOB))  # both stream
    offset = access_log_size(homeserver)
    away(homeserver, part)
    try:
        release.touch()  # the agents finish while the part is away
        await wait_until(lambda: prompts_ended(logs[ALICE]) == 1 and prompts_ended(logs[BOB]) == 1, 60, "answers ended")
        # the bridge has sent the homeserver something since (an edit, the final text)
        await wait_until(
            lambda: proxied_since(homeserver, offset, "/send/m.room.message/"), 60, "the bridge sent while it was away"
        )
    finally:
        await back(homeserver, part)
    await sync_until(owner, lambda: finished(owner, streaming, ALICE) and finished(owner, other, BOB), timeout=180)
    await running.idle(timeout=180)
    for room_id in (streaming, other):
        await caught_up(owner, room_id)
    exactly_once(owner, running, {ALICE: (streaming, "a long one"), BOB: (other, "meanwhile")}, logs)


@pytest.mark.parametrize("when", ["before handling it", "after handling it"])
async def test_the_appservice_sender_killed_mid_transaction_loses_and_repeats_nothing(
    when, homeserver, bridge_factory, owner, tmp_path
):
    """The sender is killed while the bridge holds a transaction it sent (the bridge handles it
    before or after the kill; its answer never reaches the dead sender), with the owner's next
    message queued in the sender's memory behind it."""
    workers = homeserver.workers
    running, logs = await two_echo_agents(bridge_factory, tmp_path)
    first_room, second_room = await open_dm(owner, ALICE), await open_dm(owner, BOB)
    server = running.bridge.server
    handle = server._on_transaction
    held, go = asyncio.Event(), asyncio.Event()

    async def gated(transaction):
        # the owner's message, known by its room and text: with workers the sender can deliver
        # it before room_send has returned its id to the owner (the event persister tells the
        # sender and the generic worker at once)
        ours = any(
            e.get("room_id") == first_room and (e.get("content") or {}).get("body") == "first"
            for e in transaction.events
        )
        if ours and when == "before handling it" and not go.is_set():
            held.set()
            await go.wait()
        await handle(transaction)
        if ours and when == "after handling it" and not go.is_set():
            held.set()
            await go.wait()

    server._on_transaction = gated
    try:
        await owner.room_send(first_room, "m.room.message", {"msgtype": "m.text", "body": "first"})
        await wait_until(held.is_set, 60, "the bridge holds the transaction of 'first'")
        queued = await say(owner, second_room, "second")
        await wait_until(lambda: workers.taken_for_appservices(queued), 60, "the sender took 'second'")
        workers.kill(SENDER)
        go.set()
        await workers.start_process(SENDER)
        # traffic after the restart: the owner writes again
        await say(owner, first_room, "third")
        await sync_until(
            owner,
            lambda: (
                [a["body"] for a in answers_in(events_in(owner, first_room), ALICE)] == ["echo: first", "echo: third"]
                and [a["body"] for a in answers_in(events_in(owner, second_room), BOB)] == ["echo: second"]
            ),
            timeout=180,
        )
    finally:
        go.set()
        server._on_transaction = handle
    await running.idle(timeout=180)
    for room_id in (first_room, second_room):
        await caught_up(owner, room_id)
    assert prompts(logs[ALICE]) == ["first", "third"], prompts(logs[ALICE])
    assert prompts(logs[BOB]) == ["second"], prompts(logs[BOB])
    assert [a["body"] for a in answers_in(events_in(owner, first_room), ALICE)] == ["echo: first", "echo: third"]
    assert [a["body"] for a in answers_in(events_in(owner, second_room), BOB)] == ["echo: second"]
    for room_id, puppet in ((first_room, ALICE), (second_room, BOB)):
        assert edits_after_final(events_in(owner, room_id), puppet) == []
