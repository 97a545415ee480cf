"""The bridge's two seams end to end (real Synapse, real bridge, scripted agents): every incoming
event passes the dispatcher, every outgoing event an Intent, and the faults that lived there."""
from __future__ import annotations

import asyncio
import secrets

import aiohttp
import nio

from bridge import dispatch
from bridge_harness import agent, answers_in, start_bridge
from matrix_helpers import events_in, login, sync_until, texts_in
from store import StoreError

ALICE, BOT = "@sk_alice:localhost", "@sidekicks:localhost"


def notices(owner, room_id: str, sender: str = BOT) -> list[str]:
    return [e["content"]["body"] for e in events_in(owner, room_id)
            if e.get("type") == "m.room.message" and e.get("sender") == sender
            and e["content"].get("msgtype") == "m.notice"]


def joined(owner, room_id: str, user_id: str) -> bool:
    state = [e for e in events_in(owner, room_id)
             if e.get("type") == "m.room.member" and e.get("state_key") == user_id]
    return bool(state) and state[-1]["content"].get("membership") == "join"


async def open_dm(owner, puppet_id: str = ALICE) -> str:
    room = (await owner.room_create(is_direct=True, invite=[puppet_id],
                                    preset=nio.RoomPreset.trusted_private_chat)).room_id
    await sync_until(owner, lambda: joined(owner, room, puppet_id))
    return room


async def say(owner, room_id: str, text: str, **extra) -> str:
    response = await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": text, **extra})
    assert isinstance(response, nio.RoomSendResponse), response
    return response.event_id


async def until(predicate, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"{predicate} still false after {timeout} s"
        await asyncio.sleep(0.05)


async def put_transaction(homeserver, running, txn_id: str, events: list[dict]) -> int:
    """Send the bridge a transaction as the homeserver would (e.g. one it sends again)."""
    url = f"http://127.0.0.1:{homeserver.as_port}/_matrix/app/v1/transactions/{txn_id}"
    headers = {"Authorization": f"Bearer {running.bridge.registration.hs_token}"}
    async with aiohttp.ClientSession() as http:
        async with http.put(url, json={"events": events}, headers=headers) as response:
            return response.status


async def test_a_message_sent_before_the_puppet_joined_goes_through_the_dispatcher(homeserver, tmp_path,
                                                                                   monkeypatch):
    """The invite waits for the bridge (not running); the owner writes meanwhile. Synapse never
    sends that message to the appservice (no puppet had joined): the puppet reads it back when it
    joins, and it is handled through Dispatcher.event like any other."""
    seen: list[str] = []
    original = dispatch.Dispatcher.event

    async def event(self, e):
        seen.append(e.get("event_id"))
        return await original(self, e)

    monkeypatch.setattr(dispatch.Dispatcher, "event", event)
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    running = None
    try:
        room = (await owner.room_create(name="early", invite=[ALICE], preset=nio.RoomPreset.private_chat)).room_id
        sent = await owner.room_send(room, "m.room.message", {"msgtype": "m.text", "body": "early bird"})
        assert isinstance(sent, nio.RoomSendResponse), sent
        running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
        await sync_until(owner, lambda: any("early bird" in t for t in texts_in(owner, room, ALICE)),
                         timeout=60)
        assert sent.event_id in seen
        assert [e for e in events_in(owner, room) if e.get("sender") == ALICE and e["type"] == "m.room.message"]
    finally:
        await owner.close()
        if running is not None:
            await running.stop()


async def test_a_store_error_while_a_message_is_taken_loses_nothing(homeserver, tmp_path):
    """The store fails once while the owner's message is taken: the transaction is refused,
    Synapse sends it again, and the message is answered — once."""
    log = tmp_path / "alice.log"
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent("--log", str(log))})
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        room = await open_dm(owner)
        store = running.store
        original, failures = store.add_message, []

        def add_message(channel_id, sender, role, text, event_ids):
            if role == "user" and not failures:
                failures.append(text)
                raise StoreError("add_message failed: database is locked")
            return original(channel_id, sender, role, text, event_ids)

        store.add_message = add_message
        await say(owner, room, "do not lose me")
        await sync_until(owner, lambda: any(a["body"] == "echo: do not lose me"
                                            for a in answers_in(events_in(owner, room), ALICE)), timeout=90)
        assert failures == ["do not lose me"]
        channel = store.channel_by_room(room)
        await until(lambda: len(store.last_messages(channel.id, 10)) == 2)
        assert [(m.role, m.text) for m in store.last_messages(channel.id, 10)] == [
            ("user", "do not lose me"), ("agent", "echo: do not lose me")]
        prompts = [line for line in log.read_text().splitlines() if '"session/prompt"' in line]
        assert len(prompts) == 1
        assert [a["body"] for a in answers_in(events_in(owner, room), ALICE)] == ["echo: do not lose me"]
    finally:
        await owner.close()
        await running.stop()


async def test_a_command_delivered_again_runs_once(homeserver, tmp_path):
    """The same `!new` event comes in two transactions (as after a crash before the first was
    recorded, or a refused transaction sent again): one room is made."""
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        dm = (await owner.room_create(is_direct=True, invite=[BOT],
                                      preset=nio.RoomPreset.trusted_private_chat)).room_id
        await sync_until(owner, lambda: notices(owner, dm))  # the bot's greeting
        name = f"again-{secrets.token_hex(3)}"
        event = {"event_id": f"$replayed-{name}", "type": "m.room.message", "room_id": dm,
                 "sender": homeserver.owner_id, "origin_server_ts": 1,
                 "content": {"msgtype": "m.text", "body": f"!new {name} alice"}}
        assert await put_transaction(homeserver, running, f"replay-{name}-1", [event]) == 200
        assert await put_transaction(homeserver, running, f"replay-{name}-2", [event]) == 200
        await sync_until(owner, lambda: any(n.startswith(f"Made #{name}") for n in notices(owner, dm)))
        assert [c.name for c in running.store.channels()].count(name) == 1
        assert sum(1 for n in notices(owner, dm) if n.startswith(f"Made #{name}")) == 1
    finally:
        await owner.close()
        await running.stop()
