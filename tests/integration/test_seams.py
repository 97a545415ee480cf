"""The bridge's two seams end to end (real Synapse, real bridge, scripted agents): every incoming
event passes the dispatcher, every outgoing event an Intent, and the faults that lived there."""

from __future__ import annotations

import asyncio
import json
import secrets
from functools import partial

import aiohttp
import nio
from bridge_harness import agent, answers_in, start_bridge, wait_until
from helpers import joined, open_dm, say
from matrix_helpers import events_in, notices, sync_until, texts_in

from bridge.matrix import dispatch
from store import StoreError

ALICE, BOT = "@sk_alice:localhost", "@sidekicks:localhost"


until = partial(wait_until, timeout=30)


async def put_transaction(homeserver, running, txn_id: str, events: list[dict]) -> int:
    """Send the bridge a transaction as the homeserver would (e.g. one it sends again)."""
    url = f"http://127.0.0.1:{homeserver.as_port}/_matrix/app/v1/transactions/{txn_id}"
    headers = {"Authorization": f"Bearer {running.bridge.registration.hs_token}"}
    async with aiohttp.ClientSession() as http:
        async with http.put(url, json={"events": events}, headers=headers) as response:
            return response.status


async def test_a_message_sent_before_the_puppet_joined_goes_through_the_dispatcher(
    homeserver, tmp_path, monkeypatch, owner
):
    """The invite waits for the bridge (not running); the owner writes meanwhile. Synapse never
    sends that message to the appservice (no puppet had joined): the puppet reads it back when it
    joins, and it is handled through Dispatcher.event like any other."""
    seen: list[str] = []
    original = dispatch.Dispatcher.event

    async def event(self, e):
        seen.append(e.get("event_id"))
        return await original(self, e)

    monkeypatch.setattr(dispatch.Dispatcher, "event", event)
    running = None
    try:
        room = (await owner.room_create(name="early", invite=[ALICE], preset=nio.RoomPreset.private_chat)).room_id
        sent = await owner.room_send(room, "m.room.message", {"msgtype": "m.text", "body": "early bird"})
        assert isinstance(sent, nio.RoomSendResponse), sent
        running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
        await sync_until(owner, lambda: any("early bird" in t for t in texts_in(owner, room, ALICE)), timeout=60)
        assert sent.event_id in seen
        assert [e for e in events_in(owner, room) if e.get("sender") == ALICE and e["type"] == "m.room.message"]
    finally:
        if running is not None:
            await running.stop()


async def test_a_store_error_while_a_message_is_taken_loses_nothing(homeserver, tmp_path, owner):
    """The store fails once while the owner's message is taken: the transaction is refused,
    Synapse sends it again, and the message is answered — once."""
    log = tmp_path / "alice.log"
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent("--log", str(log))})
    try:
        room = await open_dm(owner)
        store = running.store
        original, failures = store.turns.take, []

        def take(channel_id, sender, text, *args, **kwargs):  # the message and its turns
            if not failures:
                failures.append(text)
                raise StoreError("take failed: database is locked")
            return original(channel_id, sender, text, *args, **kwargs)

        store.turns.take = take
        await say(owner, room, "do not lose me")
        await sync_until(
            owner,
            lambda: any(a["body"] == "echo: do not lose me" for a in answers_in(events_in(owner, room), ALICE)),
            timeout=90,
        )
        assert failures == ["do not lose me"]
        channel = store.channel_by_room(room)
        await until(lambda: len(store.last_messages(channel.id, 10)) == 2)
        assert [(m.role, m.text) for m in store.last_messages(channel.id, 10)] == [
            ("user", "do not lose me"),
            ("agent", "echo: do not lose me"),
        ]
        prompts = [line for line in log.read_text().splitlines() if '"session/prompt"' in line]
        assert len(prompts) == 1
        assert [a["body"] for a in answers_in(events_in(owner, room), ALICE)] == ["echo: do not lose me"]
    finally:
        await running.stop()


async def test_a_command_delivered_again_runs_once(homeserver, tmp_path, owner):
    """The same `!new` event comes in two transactions (as after a crash before the first was
    recorded, or a refused transaction sent again): one room is made."""
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
    try:
        dm = (await owner.room_create(is_direct=True, invite=[BOT], preset=nio.RoomPreset.trusted_private_chat)).room_id
        await sync_until(owner, lambda: notices(owner, dm, BOT))  # the bot's greeting
        name = f"again-{secrets.token_hex(3)}"
        event = {
            "event_id": f"$replayed-{name}",
            "type": "m.room.message",
            "room_id": dm,
            "sender": homeserver.owner_id,
            "origin_server_ts": 1,
            "content": {"msgtype": "m.text", "body": f"!new {name} alice"},
        }
        assert await put_transaction(homeserver, running, f"replay-{name}-1", [event]) == 200
        assert await put_transaction(homeserver, running, f"replay-{name}-2", [event]) == 200
        await sync_until(owner, lambda: any(n.startswith(f"Made #{name}") for n in notices(owner, dm, BOT)))
        assert [c.name for c in running.store.channels()].count(name) == 1
        assert sum(1 for n in notices(owner, dm, BOT) if n.startswith(f"Made #{name}")) == 1
    finally:
        await running.stop()


# ---- replies: the quote is no mention, a number answers the question it replies to -------------


def fallback_reply(room_id: str, event: dict, text: str, html: str | None = None) -> dict:
    """A rich reply as clients before Matrix 1.13 send it: quote in body and in <mx-reply>."""
    quoted = event["content"]["body"].splitlines() or [""]
    body = "\n".join([f"> <{event['sender']}> {quoted[0]}"] + [f"> {line}" for line in quoted[1:]]) + "\n\n" + text
    reply_html = (
        f'<mx-reply><blockquote><a href="https://matrix.to/#/{room_id}/{event["event_id"]}">'
        f'In reply to</a> <a href="https://matrix.to/#/{event["sender"]}">{event["sender"]}</a>'
        f"<br>{quoted[0]}</blockquote></mx-reply>{html or text}"
    )
    return {
        "msgtype": "m.text",
        "body": body,
        "format": "org.matrix.custom.html",
        "formatted_body": reply_html,
        "m.relates_to": {"m.in_reply_to": {"event_id": event["event_id"]}},
    }


def puppet_messages(owner, room_id: str, sender: str) -> list[dict]:
    return [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and e.get("sender") == sender and "m.new_content" not in e["content"]
    ]


async def test_a_reply_to_alice_that_names_bob_goes_to_bob_alone_and_is_stored_without_the_quote(
    homeserver, tmp_path, owner
):
    BOB = "@sk_bob:localhost"
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent(), "bob": agent()})
    try:
        room = (
            await owner.room_create(name="replies", invite=[ALICE, BOB], preset=nio.RoomPreset.private_chat)
        ).room_id
        await sync_until(owner, lambda: joined(owner, room, ALICE) and joined(owner, room, BOB))
        await say(owner, room, "@alice first")
        await sync_until(
            owner, lambda: any(a["body"].endswith("@alice first") for a in answers_in(events_in(owner, room), ALICE))
        )
        alices = puppet_messages(owner, room, ALICE)[-1]
        response = await owner.room_send(
            room, "m.room.message", fallback_reply(room, alices, "@bob what do you think?")
        )
        assert isinstance(response, nio.RoomSendResponse), response
        await sync_until(
            owner,
            lambda: any(a["body"].endswith("@bob what do you think?") for a in answers_in(events_in(owner, room), BOB)),
        )
        channel = running.store.channel_by_room(room)
        await until(lambda: len(running.store.last_messages(channel.id, 10)) == 4)
        stored = running.store.last_messages(channel.id, 10)
        assert [(m.role, m.sender) for m in stored][2:] == [("user", homeserver.owner_id), ("agent", "bob")]
        assert stored[2].text == "@bob what do you think?"  # no quote kept
        # alice was quoted, not mentioned: she answered only her own message
        assert len(answers_in(events_in(owner, room), ALICE)) == 1
    finally:
        await running.stop()


async def test_a_number_sent_as_a_reply_answers_the_question_it_replies_to(homeserver, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent("--log", str(log), title="Alice")})
    try:
        room = await open_dm(owner)
        await say(owner, room, "[[permission]] write notes")
        await sync_until(
            owner, lambda: any("asks permission" in e["content"]["body"] for e in puppet_messages(owner, room, ALICE))
        )
        question = next(e for e in puppet_messages(owner, room, ALICE) if "asks permission" in e["content"]["body"])
        response = await owner.room_send(room, "m.room.message", fallback_reply(room, question, "2"))
        assert isinstance(response, nio.RoomSendResponse), response
        await sync_until(owner, lambda: any(a["body"] == "rejected" for a in answers_in(events_in(owner, room), ALICE)))
        outcomes = [
            m["result"]["outcome"]
            for m in map(json.loads, log.read_text().splitlines())
            if "result" in m and "outcome" in (m["result"] or {})
        ]
        assert outcomes == [{"outcome": "selected", "optionId": "reject_once"}]
        prompts = [m for m in map(json.loads, log.read_text().splitlines()) if m.get("method") == "session/prompt"]
        assert len(prompts) == 1  # the reply was the answer, not a new prompt
        # a late reply to the decided question is told so, and is no prompt either
        await owner.room_send(room, "m.room.message", fallback_reply(room, question, "1"))
        await sync_until(
            owner, lambda: any("closed already" in e["content"]["body"] for e in puppet_messages(owner, room, ALICE))
        )
        assert (
            len([m for m in map(json.loads, log.read_text().splitlines()) if m.get("method") == "session/prompt"]) == 1
        )
    finally:
        await running.stop()


async def test_commands_starts_agents_without_holding_up_other_events(homeserver, tmp_path, monkeypatch, owner):
    """`!commands` may start agents (seconds): while it does, the next transaction — bob's DM —
    is handled; the listing comes after."""
    from bridge.channels.commands.commands import BotCommands

    BOB = "@sk_bob:localhost"
    release, entered = asyncio.Event(), []
    original = BotCommands._prepare

    async def slow_prepare(self, portal, agent_name, conversation=""):
        entered.append(agent_name)
        await release.wait()  # an agent that takes its time to start
        return await original(self, portal, agent_name, conversation)

    monkeypatch.setattr(BotCommands, "_prepare", slow_prepare)
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent(), "bob": agent()})
    try:
        channel = await open_dm(owner, ALICE)
        bob = await open_dm(owner, BOB)
        await say(owner, channel, "!commands")
        await sync_until(owner, lambda: entered == ["alice"])  # alice is being started for it
        await say(owner, bob, "are you there?")
        await sync_until(
            owner,
            lambda: any(a["body"] == "echo: are you there?" for a in answers_in(events_in(owner, bob), BOB)),
            timeout=60,
        )
        assert not any("Commands in" in n for n in notices(owner, channel, ALICE))
        release.set()
        await sync_until(owner, lambda: any("Commands in" in n for n in notices(owner, channel, ALICE)), timeout=30)
    finally:
        release.set()
        await running.stop()


# ---- a turn that fails on the Matrix side still ends: finished, or interrupted and recorded ----


def failing_sends(intent, refuse):
    """Make `intent.send` raise a 502 MatrixError whenever refuse(content, n) is true (n counts
    the new messages, not the edits)."""
    from bridge.matrix.client import MatrixError

    original, count = intent.send, [0]

    async def send(room_id, content, **kwargs):
        edit = (content.get("m.relates_to") or {}).get("rel_type") == "m.replace"
        if not edit:
            count[0] += 1
        if refuse(edit, count[0]):
            raise MatrixError("sending: M_UNKNOWN the homeserver is busy", 502)
        return await original(room_id, content, **kwargs)

    intent.send = send


async def test_a_failed_send_while_an_answer_splits_still_finishes_and_stores_it(homeserver, tmp_path, owner):
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
    try:
        room = await open_dm(owner)
        refused = []

        def refuse(edit, new_messages):  # the second message of the answer, once
            if not edit and new_messages == 2 and not refused:
                refused.append(new_messages)
                return True
            return False

        failing_sends((await running.bridge.puppet("alice")).intent, refuse)
        await say(owner, room, "[[size:40000]] [[chunks:20]] [[delay:0.1]] long")

        def done():
            answers = answers_in(events_in(owner, room), ALICE)
            return len(answers) == 3 and not any(a["body"].startswith(("⏳", "💭", "✍️")) for a in answers)

        await sync_until(owner, done, timeout=90)
        assert refused == [2]
        channel = running.store.channel_by_room(room)
        await until(lambda: len(running.store.last_messages(channel.id, 10)) == 2)
        stored = running.store.last_messages(channel.id, 10)[1]
        assert stored.role == "agent" and len(stored.text) == 40000
        assert "".join(a["body"] for a in answers_in(events_in(owner, room), ALICE)) == stored.text
        assert len(stored.event_ids) == 3
    finally:
        await running.stop()


async def test_an_answer_the_homeserver_refuses_is_recorded_and_finished_at_the_next_start(
    homeserver, tmp_path, owner, monkeypatch
):
    """The agent finished, the homeserver refused the final text (and the "interrupted" mark)
    for longer than the bridge waits for it: the turn record keeps the final send, and the next
    start sends it again — the complete answer, once — and stores it."""
    from bridge.channels.base import stream

    # a homeserver answering 5xx is waited for (docs/outages.md): 2 s here instead of 10 minutes
    monkeypatch.setattr(stream, "FINAL_PATIENCE", 2.0)
    folder = tmp_path / "bridge"
    running = await start_bridge(homeserver, folder, {"alice": agent()})
    try:
        room = await open_dm(owner)
        # only the placeholder gets through: every edit and message after it is refused
        failing_sends(
            (await running.bridge.puppet("alice")).intent, lambda edit, new_messages: edit or new_messages > 1
        )
        await say(owner, room, "[[chunks:5]] [[delay:0.1]] refused")
        await sync_until(owner, lambda: answers_in(events_in(owner, room), ALICE))
        placeholder = answers_in(events_in(owner, room), ALICE)[0]["event_id"]
        # the turn ends (the final text is refused): its record keeps the final send, unstored
        await until(lambda: running.bridge.portals[room].current is None, timeout=60)
        (turn,) = running.store.turns.unfinished()
        assert turn.state == "finishing" and placeholder in turn.answer
        channel = running.store.channel_by_room(room)
        assert [m.role for m in running.store.last_messages(channel.id, 10)] == ["user"]
        await running.stop()
        running = await start_bridge(homeserver, folder, {"alice": agent()})  # sends work again
        await sync_until(
            owner,
            lambda: (
                "refused" in answers_in(events_in(owner, room), ALICE)[0]["body"]
                and not answers_in(events_in(owner, room), ALICE)[0]["body"].startswith(("⏳", "✍"))
            ),
            timeout=60,
        )
        assert "interrupted" not in answers_in(events_in(owner, room), ALICE)[0]["body"]
        assert running.store.turns.unfinished() == []
        assert [m.role for m in running.store.last_messages(channel.id, 10)] == ["user", "agent"]
        assert len(answers_in(events_in(owner, room), ALICE)) == 1  # not answered again
    finally:
        await running.stop()


async def test_a_stop_while_the_final_text_goes_out_lets_the_complete_answer_land(homeserver, tmp_path, owner):
    """The agent is done and the final edit is on its way when the bridge is told to stop: the
    answer lands complete and is stored, instead of being marked interrupted."""
    from store import Store

    folder = tmp_path / "bridge"
    running = await start_bridge(homeserver, folder, {"alice": agent("--chunks", "3", "--delay", "0.2")})
    try:
        room = await open_dm(owner)
        intent = (await running.bridge.puppet("alice")).intent
        original, release, held = intent.edit, asyncio.Event(), []

        async def edit(room_id, event_id, new_content, **kwargs):
            if not new_content["body"].startswith(("⏳", "💭", "✍️", "🔧")):  # the final text
                held.append(new_content["body"])
                await release.wait()
            return await original(room_id, event_id, new_content, **kwargs)

        intent.edit = edit
        await say(owner, room, "complete me")
        await until(lambda: held)
        worker = running.bridge.portals[room].lines[""].worker  # the main timeline's
        stopping = asyncio.create_task(running.stop())
        await until(lambda: worker.cancelling())  # the stop has reached the turn
        release.set()
        await stopping
        await sync_until(
            owner,
            lambda: any(
                a["body"] == "echo: complete me" and a["edits"] for a in answers_in(events_in(owner, room), ALICE)
            ),
        )
        assert held == ["echo: complete me"]
        assert not any("interrupted" in a["body"] for a in answers_in(events_in(owner, room), ALICE))
        with Store.open("sqlite", folder / "data") as store:
            channel = store.channel_by_room(room)
            assert [(m.role, m.text) for m in store.last_messages(channel.id, 10)] == [
                ("user", "complete me"),
                ("agent", "echo: complete me"),
            ]
    finally:
        release.set()
        await running.stop()
