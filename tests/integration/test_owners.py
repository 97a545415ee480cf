"""Several owners in one room (docs/architecture.md "Conversations and threads"): real Synapse, two
owners' matrix-nio clients, the real bridge in-process, a scripted agent that logs every JSON-RPC
message it receives.

An agent's permission prompt is answered by the owner whose message started the turn: the other
owner's "1" or keycap is refused in one line in the turn's thread and changes nothing (the agent
still waits); the first owner's "1" answers it.
"""

from __future__ import annotations

import secrets

import nio
from bridge_harness import agent, answers_in
from helpers import (
    ALICE,
    answered,
    in_thread,
    keycapped_prompt,
    originals,
    permission_answers,
    permission_prompts,
    prompts,
    say,
    thread_of,
)
from matrix_helpers import events_in, login, sync_until


async def second_owner(homeserver) -> nio.AsyncClient:
    """A new user of the shared Synapse, logged in (a name of its own: the server outlives the test)."""
    name, password = f"ben{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    user_id = await homeserver.server.register_user(name, password)
    return await login(homeserver, user_id, password)


async def test_only_the_owner_who_started_the_turn_answers_its_permission_prompt(
    bridge_factory, homeserver, tmp_path, owner
):
    ben = await second_owner(homeserver)
    try:
        log = tmp_path / "alice.log"
        running = await bridge_factory(
            {"alice": agent("--log", str(log), title="Alice")}, owner=[homeserver.owner_id, ben.user_id]
        )
        created = await owner.room_create(name="both", invite=[ALICE, ben.user_id], preset=nio.RoomPreset.private_chat)
        assert isinstance(created, nio.RoomCreateResponse), created
        room_id = created.room_id
        await sync_until(ben, lambda: room_id in ben.invited_rooms)
        assert isinstance(await ben.join(room_id), nio.JoinResponse)
        root = await say(owner, room_id, "@alice hello")
        await answered(owner, room_id, ALICE, 1)
        await running.idle()

        # the owner asks in a thread; alice asks permission there
        await say(owner, room_id, "[[permission]] write notes", **in_thread(root, root))

        ask = await keycapped_prompt(owner, room_id)
        assert thread_of(ask) == root

        # the other owner's "1" in the thread, and their keycap 2️⃣ on the prompt: refused, each in one line
        refused = f"Only {owner.user_id}, who started this turn, can answer this."

        def refusals() -> list[dict]:
            return [e for e in originals(owner, room_id, ALICE) if e["content"].get("body") == refused]

        await say(ben, room_id, "1", **in_thread(root, root))
        await sync_until(owner, lambda: len(refusals()) == 1, timeout=60)
        sent = await ben.room_send(
            room_id,
            "m.reaction",
            {"m.relates_to": {"rel_type": "m.annotation", "event_id": ask["event_id"], "key": "2️⃣"}},
        )
        assert isinstance(sent, nio.RoomSendResponse), sent
        await sync_until(owner, lambda: len(refusals()) == 2, timeout=60)
        assert all(thread_of(e) == root and e["content"]["msgtype"] == "m.notice" for e in refusals())
        # nothing changed: the agent still waits, the prompt is not edited, the "1" is no prompt
        assert permission_answers(log) == []
        assert not any(
            e["content"].get("m.relates_to", {}).get("event_id") == ask["event_id"]
            for e in events_in(owner, room_id)
            if e.get("sender") == ALICE and e.get("type") == "m.room.message"
        )
        assert len(prompts(log)) == 2

        # the owner who started the turn answers with "1": allowed
        await say(owner, room_id, "1", **in_thread(root, refusals()[-1]["event_id"]))
        await sync_until(
            owner, lambda: any(a["body"] == "allowed" for a in answers_in(events_in(owner, room_id), ALICE)), timeout=60
        )
        await running.idle()
        [answer] = permission_answers(log)
        assert answer["result"]["outcome"] == {"outcome": "selected", "optionId": "allow_once"}
        shown = {a["event_id"]: a["body"] for a in answers_in(events_in(owner, room_id), ALICE)}
        assert shown[ask["event_id"]].endswith("✅ Allowed once")
        assert len(refusals()) == 2 and len(prompts(log)) == 2
        # neither "1" is stored as a message of the thread
        channel = running.store.channel_by_room(room_id)
        assert [m.text for m in running.store.messages_in(channel.id, root, None, 20)] == [
            "@alice hello",
            "[[permission]] write notes",
            "allowed",
        ]
    finally:
        await ben.close()


async def test_a_permission_prompt_mentions_who_answers_it_and_any_owner_may_answer_when_the_channel_says_so(
    bridge_factory, homeserver, tmp_path, owner
):
    """The prompt mentions the owner whose message started the turn (`m.mentions.user_ids` and
    a matrix.to pill); the answer around it declares no mentions. `!approve any-owner`: the
    next prompt mentions both owners and the second owner's "1" answers it."""
    ben = await second_owner(homeserver)
    try:
        log = tmp_path / "alice.log"
        running = await bridge_factory(
            {"alice": agent("--log", str(log), title="Alice")}, owner=[homeserver.owner_id, ben.user_id]
        )
        created = await owner.room_create(
            name="approvals", invite=[ALICE, ben.user_id], preset=nio.RoomPreset.private_chat
        )
        assert isinstance(created, nio.RoomCreateResponse), created
        room_id = created.room_id
        await sync_until(ben, lambda: room_id in ben.invited_rooms)
        assert isinstance(await ben.join(room_id), nio.JoinResponse)

        def allowed() -> int:
            return sum(1 for a in answers_in(events_in(owner, room_id), ALICE) if a["body"] == "allowed")

        await say(owner, room_id, "@alice [[permission]] write notes")
        await sync_until(ben, lambda: len(permission_prompts(ben, room_id)) == 1, timeout=60)
        [ask] = permission_prompts(ben, room_id)
        assert ask["content"]["m.mentions"] == {"user_ids": [owner.user_id]}
        assert f'href="https://matrix.to/#/{owner.user_id}"' in ask["content"]["formatted_body"]
        await say(owner, room_id, "1")
        await sync_until(owner, lambda: allowed() == 1, timeout=60)
        await running.idle()
        # every other message of alice's declares no mentions
        others = [
            e
            for e in events_in(owner, room_id)
            if e.get("sender") == ALICE and e.get("type") == "m.room.message" and e["event_id"] != ask["event_id"]
        ]
        assert others and all(e["content"].get("m.mentions") == {} for e in others)

        await say(owner, room_id, "!approve any-owner")
        await sync_until(
            owner,
            lambda: any(
                "Any owner may answer" in e["content"].get("body", "") for e in originals(owner, room_id, ALICE)
            ),
            timeout=60,
        )
        await say(owner, room_id, "@alice [[permission]] write more notes")
        await sync_until(ben, lambda: len(permission_prompts(ben, room_id)) == 2, timeout=60)
        second = permission_prompts(ben, room_id)[1]
        assert sorted(second["content"]["m.mentions"]["user_ids"]) == sorted([owner.user_id, ben.user_id])
        await say(ben, room_id, "1")
        await sync_until(owner, lambda: allowed() == 2, timeout=60)
        assert not any(
            "who started this turn" in e["content"].get("body", "") for e in originals(owner, room_id, ALICE)
        )
        assert [a["result"]["outcome"]["optionId"] for a in permission_answers(log)] == ["allow_once"] * 2
    finally:
        await ben.close()
