"""What the integration tests share: the owner's words and what the owner sees, a scripted
agent's log. (The owner's client itself is the `owner` fixture of tests/integration/conftest.py;
Synapse and the client helpers are in tests/matrix_helpers.py, the bridge in
tests/bridge_harness.py.)

Imported as `helpers`: tests/integration is on sys.path, since it is not a package.
"""

from __future__ import annotations

import json
from pathlib import Path

import nio
from bridge_harness import agent, answers_in, wait_until
from invariants import STATUS as STATUS  # an answer's status line while it is being written
from matrix_helpers import events_in, login, sync_until, wait_joined
from matrix_helpers import joined as joined  # re-exported: the owner's helpers in one place
from matrix_helpers import open_dm as open_dm

ALICE, BOB, BOT = "@sk_alice:localhost", "@sk_bob:localhost", "@sidekicks:localhost"


# ---- a scripted agent's log (`--log FILE`: every JSON-RPC message it received, a line each) ----


def received(log_path: Path) -> list[dict]:
    """Every message the agent received, oldest first ([] before it wrote its log)."""
    if not log_path.exists():
        return []
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


def prompts(log_path: Path) -> list[str]:
    """The text of every session/prompt the agent received, in order."""
    return [
        "".join(block.get("text", "") for block in message["params"]["prompt"])
        for message in received(log_path)
        if message.get("method") == "session/prompt"
    ]


def permission_answers(log_path: Path) -> list[dict]:
    """The bridge's answers to the agent's permission requests, as the agent received them."""
    return [m for m in received(log_path) if "method" not in m and "outcome" in (m.get("result") or {})]


# ---- the owner in Matrix ---------------------------------------------------------------------


async def group(owner: nio.AsyncClient, *puppets: str, name: str = "general") -> str:
    """A new private room `name` with `puppets` invited, once they have all joined."""
    response = await owner.room_create(name=name, invite=list(puppets), preset=nio.RoomPreset.private_chat)
    assert isinstance(response, nio.RoomCreateResponse), response
    await wait_joined(owner, response.room_id, *puppets)
    return response.room_id


async def two_echo_agents(bridge_factory, tmp_path: Path):
    """A bridge with alice and bob, each echoing the owner's last line and logging its prompts:
    the running bridge and the logs by puppet id."""
    logs = {ALICE: tmp_path / "alice.jsonl", BOB: tmp_path / "bob.jsonl"}
    running = await bridge_factory(
        {
            "alice": agent("--log", str(logs[ALICE]), "--echo-last-line"),
            "bob": agent("--log", str(logs[BOB]), "--echo-last-line"),
        }
    )
    return running, logs


async def stored_channel(store, room_id: str):
    """The bridge's channel of `room_id` once it is stored: a puppet joins first and the channel
    is written after (channels/events/inbound.py), so the owner can see the join before it."""
    await wait_until(lambda: store.channel_by_room(room_id) is not None, what=f"the channel of {room_id} is stored")
    return store.channel_by_room(room_id)


async def say(
    client: nio.AsyncClient,
    room_id: str,
    text: str,
    html: str | None = None,
    user_ids: list[str] | None = None,
    **extra,
) -> str:
    """Send a text message (with its HTML, its mentions, any more content fields); its event id."""
    content = {"msgtype": "m.text", "body": text}
    if html is not None:
        content.update(format="org.matrix.custom.html", formatted_body=html)
    if user_ids is not None:
        content["m.mentions"] = {"user_ids": user_ids}
    content.update(extra)
    response = await client.room_send(room_id, "m.room.message", content)
    assert isinstance(response, nio.RoomSendResponse), response
    return response.event_id


def is_final(answer: dict) -> bool:
    """An answer (as bridge_harness.answers_in gives it) that no longer shows a status line."""
    return not answer["body"].startswith(STATUS) and "getting ready" not in answer["body"]


# ---- threads (docs/architecture.md "Conversations and threads") ----


def in_thread(root: str, latest: str) -> dict:
    """The content fields of a thread message as Element sends it."""
    return {
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": latest},
        }
    }


def originals(owner, room_id, sender) -> list[dict]:
    """`sender`'s messages as first sent (not edits), oldest first."""
    return [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message"
        and e.get("sender") == sender
        and (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"
    ]


def thread_of(event: dict) -> str:
    relates = event["content"].get("m.relates_to") or {}
    return relates.get("event_id", "") if relates.get("rel_type") == "m.thread" else ""


def permission_prompts(client, room_id, sender=ALICE) -> list[dict]:
    """`sender`'s permission prompts ("… asks permission: …") as first sent, oldest first."""
    return [e for e in originals(client, room_id, sender) if "asks permission" in e["content"].get("body", "")]


async def keycapped_prompt(owner, room_id, sender=ALICE, keycaps: int = 2) -> dict:
    """`sender`'s first permission prompt (as first sent), once it has put its `keycaps` keycaps
    on it."""

    def on_it() -> int:
        prompt = permission_prompts(owner, room_id, sender)[0]["event_id"]
        return sum(
            1
            for e in events_in(owner, room_id)
            if e.get("type") == "m.reaction"
            and e.get("sender") == sender
            and e["content"]["m.relates_to"]["event_id"] == prompt
        )

    await sync_until(owner, lambda: bool(permission_prompts(owner, room_id, sender)) and on_it() == keycaps)
    return permission_prompts(owner, room_id, sender)[0]


async def answered(owner, room_id, sender, count) -> list[dict]:
    """Once `sender` has `count` finished answers: each as first sent, its final body added."""

    def done():
        answers = [a for a in answers_in(events_in(owner, room_id), sender) if a["msgtype"] != "m.notice"]
        return len(answers) >= count and all(is_final(a) for a in answers[:count])

    await sync_until(owner, done, timeout=60)
    final = {a["event_id"]: a["body"] for a in answers_in(events_in(owner, room_id), sender)}
    return [
        {**e, "final": final[e["event_id"]]}
        for e in originals(owner, room_id, sender)
        if e["content"].get("msgtype") != "m.notice"
    ]


# ---- the homeserver away (tests that kill or stop their private Synapse) ----------------------


async def away_while_the_answer_ends(hs, owner, log: Path, release: Path, kill: bool = True) -> nio.AsyncClient:
    """With an answer streaming and held (`[[hold:release]]`): the owner's client closed, Synapse
    killed (-9) or stopped, the answer released and ended by the agent while Synapse is away
    (`log`: the agent's), Synapse started again. Returns the owner's client logged in anew."""
    await owner.close()
    if kill:
        hs.server.kill()  # mid-answer: the next edits and the final text meet a dead homeserver
    else:
        await hs.server.stop()
    release.touch()
    await wait_until(
        lambda: any(m.get("scripted") == "prompt ended" for m in received(log)),
        what="the agent finished its answer while Synapse was away",
    )
    await hs.server.start()
    return await login(hs, hs.owner_id, hs.owner_password)


async def lost_on_the_way(running, owner, room_id: str, puppet_id: str, text: str) -> str:
    """Send `text` so that the bridge never hears of it: its transaction reaches the bridge
    without it, and is acknowledged (as a killed Synapse can lose the events it had queued for
    the appservice). First waits until the puppet's catch-up on joining is over (its invite's
    transaction handled). Returns the message's event id."""
    server = running.bridge.server
    handle = server._on_transaction

    async def losing(transaction):
        transaction.events[:] = [e for e in transaction.events if (e.get("content") or {}).get("body") != text]
        await handle(transaction)

    invite = next(
        e["event_id"]
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.member"
        and e.get("state_key") == puppet_id
        and e.get("content", {}).get("membership") == "invite"
    )
    await running.deliveries.wait(invite)
    server._on_transaction = losing
    try:
        lost = await say(owner, room_id, text)
        await running.deliveries.wait(lost)  # the homeserver is done with it
    finally:
        server._on_transaction = handle
    return lost
