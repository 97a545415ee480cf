"""Matrix conventions for bots, end to end (docs/architecture.md "The Matrix side",
"Streaming, permissions and cancel"): MSC4391 command descriptions and invocations,
MSC4357's live marker on streamed answers, puppets' presence.

Real Synapse (presence on), the owner's matrix-nio client, the real bridge in-process, scripted
agents that announce commands (`--commands`) and log what they receive (`--log`).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import quote

import aiohttp
import nio
from bridge_harness import agent, wait_until
from helpers import joined, received, say
from matrix_helpers import caught_up, events_in, login, notices, sync_until

from bridge.matrix.msc4391 import DESCRIPTION, description, state_key

BOT, ALICE, BOB = "@sidekicks:localhost", "@sk_alice:localhost", "@sk_bob:localhost"
LIVE = "org.matrix.msc4357.live"
REVIEW = "review:Review a file:path"
CLEAR = "clear:Clear the session"
LINK = re.compile(r"https://matrix\.to/#/(![^?\s]+)")


def prompt_texts(log_path) -> list[str]:
    return [
        "".join(b.get("text", "") for b in m["params"]["prompt"])
        for m in received(log_path)
        if m.get("method") == "session/prompt"
    ]


def started(log_path) -> int:
    return sum(1 for m in received(log_path) if m.get("method") == "initialize")


async def request(homeserver, owner, method: str, path: str, body=None) -> tuple[int, object]:
    async with aiohttp.ClientSession() as http:
        async with http.request(
            method, homeserver.url + path, json=body, headers={"Authorization": f"Bearer {owner.access_token}"}
        ) as response:
            return response.status, await response.json(content_type=None)


async def descriptions_in(homeserver, owner, room_id: str, sender: str) -> dict[str, dict]:
    """State key → content of `sender`'s command descriptions in the room (empty ones left out)."""
    status, state = await request(homeserver, owner, "GET", f"/_matrix/client/v3/rooms/{quote(room_id)}/state")
    assert status == 200, state
    return {
        e["state_key"]: e["content"]
        for e in state
        if e["type"] == DESCRIPTION and e["sender"] == sender and e["content"]
    }


def expected(user_id: str, *specs: str) -> dict[str, dict]:
    found = {}
    for spec in specs:
        name, desc, *hint = spec.split(":")
        content = description({"name": name, "description": desc, "input": {"hint": hint[0]} if hint else None})
        found[state_key(name, user_id)] = content
    return found


async def new_channel(owner, name: str, *agents: str) -> str:
    """`!new NAME AGENT...` in the bot's DM; the new room's id once the owner joined it."""
    dm = await owner.room_create(is_direct=True, invite=[BOT], preset=nio.RoomPreset.trusted_private_chat)
    assert isinstance(dm, nio.RoomCreateResponse), dm
    await sync_until(owner, lambda: notices(owner, dm.room_id, BOT))
    before = len(notices(owner, dm.room_id, BOT))
    await say(owner, dm.room_id, f"!new {name} {' '.join(agents)}")
    await sync_until(owner, lambda: len(notices(owner, dm.room_id, BOT)) > before)
    found = LINK.search(notices(owner, dm.room_id, BOT)[before])
    assert found, notices(owner, dm.room_id, BOT)
    room_id = found.group(1)
    response = await owner.join(room_id)
    assert isinstance(response, nio.JoinResponse), response
    return room_id


# ---- MSC4391 ------------------------------------------------------------------------------------


async def descriptions_are(running, homeserver, owner, room_id: str, user_id: str, wanted: dict) -> bool:
    """Once the bridge has no description work left: `user_id`'s descriptions in the room are `wanted`."""
    await running.bridge.command_descriptions.idle()
    return await descriptions_in(homeserver, owner, room_id, user_id) == wanted


async def test_command_descriptions_are_published_updated_and_come_from_the_store_after_a_restart(
    homeserver, bridge_factory, tmp_path, owner
):
    alice_log, bob_log = tmp_path / "alice.log", tmp_path / "bob.log"
    agents = {
        "alice": agent("--log", str(alice_log), "--commands", f"{REVIEW},{CLEAR}", "--commands-later", REVIEW),
        "bob": agent("--log", str(bob_log), "--commands", "deploy:Deploy it:target"),
    }
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    room = await new_channel(owner, "cmds", "alice", "bob")
    await say(owner, room, "!commands")  # starts both: they announce their commands
    await wait_until(lambda: running.store.agent_commands("bob") is not None, what="bob announced")

    def published(user_id, wanted):
        return descriptions_are(running, homeserver, owner, room, user_id, wanted)

    # alice first announced review and clear, then (0.3 s later) review alone: clear is withdrawn
    await wait_until(lambda: published(ALICE, expected(ALICE, REVIEW)), what="alice's descriptions")
    await wait_until(lambda: published(BOB, expected(BOB, "deploy:Deploy it:target")), what="bob's")
    status, cleared = await request(
        homeserver,
        owner,
        "GET",
        f"/_matrix/client/v3/rooms/{quote(room)}/state/{DESCRIPTION}/{quote(state_key('clear', ALICE), safe='')}",
    )
    assert (status, cleared) == (200, {})  # withdrawn: emptied

    # an MSC4391 invocation runs the command for the agent it names, as `/command args`
    invoked = await owner.room_send(
        room,
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": "@alice review main.py",
            "m.mentions": {"user_ids": [ALICE]},
            "org.matrix.msc4391.command": {"command": "review", "arguments": {"args": "main.py"}},
        },
    )
    assert isinstance(invoked, nio.RoomSendResponse), invoked
    await running.handled(invoked.event_id)
    await running.idle()
    assert prompt_texts(alice_log)[-1] == "/review main.py"
    assert prompt_texts(bob_log) == []
    await running.stop()

    # after a restart, a new room gets alice's commands from the store before she starts
    running = await bridge_factory(agents, folder=folder)
    starts = started(alice_log)
    made = await owner.room_create(
        name="later",
        invite=[ALICE],
        preset=nio.RoomPreset.private_chat,
        power_level_override={"users": {homeserver.owner_id: 100, ALICE: 50}},
    )
    # (room v10, the embedded homeserver's: the creator is listed in the power levels)
    assert isinstance(made, nio.RoomCreateResponse), made
    await sync_until(owner, lambda: joined(owner, made.room_id, ALICE))

    await wait_until(
        lambda: descriptions_are(running, homeserver, owner, made.room_id, ALICE, expected(ALICE, REVIEW)),
        what="alice's descriptions in the new room",
    )
    assert started(alice_log) == starts and running.bridge.pool.state("alice") == "stopped"


async def test_a_room_that_refuses_descriptions_is_logged_once_text_commands_work_and_a_dm_allows_them(
    homeserver, bridge_factory, tmp_path, caplog, owner
):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log), "--commands", REVIEW)})
    caplog.set_level(logging.INFO, logger="bridge.matrix.msc4391")
    made = await owner.room_create(name="plain", invite=[ALICE], preset=nio.RoomPreset.private_chat)
    assert isinstance(made, nio.RoomCreateResponse), made
    await sync_until(owner, lambda: joined(owner, made.room_id, ALICE))
    await running.handled(await say(owner, made.room_id, "/alice:review notes.txt"))
    await running.idle()
    await running.bridge.command_descriptions.idle()
    assert prompt_texts(log) == ["/review notes.txt"]
    refusals = [r.getMessage() for r in caplog.records if "are not offered after /" in r.getMessage()]
    assert len(refusals) == 1 and made.room_id in refusals[0]
    assert await descriptions_in(homeserver, owner, made.room_id, ALICE) == {}

    # a direct message the owner opens (trusted_private_chat) gives the puppet the power
    dm = await owner.room_create(is_direct=True, invite=[ALICE], preset=nio.RoomPreset.trusted_private_chat)
    assert isinstance(dm, nio.RoomCreateResponse), dm
    await sync_until(owner, lambda: joined(owner, dm.room_id, ALICE))

    await wait_until(
        lambda: descriptions_are(running, homeserver, owner, dm.room_id, ALICE, expected(ALICE, REVIEW)),
        what="alice's descriptions in the direct room",
    )


# ---- MSC4357 ------------------------------------------------------------------------------------


async def test_a_streamed_answer_is_live_until_its_final_edit_and_a_quick_one_never_is(bridge_factory, tmp_path, owner):
    release = tmp_path / "release"
    running = await bridge_factory({"alice": agent("--chunks", "2", "--answer", "one two")})
    dm = await owner.room_create(is_direct=True, invite=[ALICE], preset=nio.RoomPreset.trusted_private_chat)
    assert isinstance(dm, nio.RoomCreateResponse), dm
    room = dm.room_id
    await sync_until(owner, lambda: joined(owner, room, ALICE))
    await say(owner, room, f"hello [[hold:{release}]]")

    def ours():
        return [e for e in events_in(owner, room) if e.get("sender") == ALICE and e["type"] == "m.room.message"]

    def shows_first_part():
        return any(e["content"].get("m.new_content", {}).get("body", "").endswith("one ") for e in ours())

    await sync_until(owner, shows_first_part)  # held mid-way: still being written
    first, *edits = ours()
    assert first["content"][LIVE] == {}
    assert edits and all(e["content"]["m.new_content"][LIVE] == {} for e in edits)
    release.touch()
    await running.idle()
    await caught_up(owner, room)
    final = ours()[-1]["content"]
    assert final["m.new_content"]["body"] == "one two" and LIVE not in final["m.new_content"]
    assert LIVE not in final

    # alice runs now: her answer comes within the grace a running agent gets, so it is
    # posted once, final, without the marker (tests/unit/channels/base/test_stream_media.py shows this path
    # without timing; on a machine too busy for the grace it streams like the first one)
    before = len(ours())
    await running.handled(await say(owner, room, "again"))
    await running.idle()
    await caught_up(owner, room)
    first, *edits = ours()[before:]
    if not edits:
        assert LIVE not in first["content"] and first["content"]["body"] == "one two"
    else:
        assert first["content"][LIVE] == {} and LIVE not in edits[-1]["content"]["m.new_content"]
        assert edits[-1]["content"]["m.new_content"]["body"] == "one two"


# ---- presence -----------------------------------------------------------------------------------


async def test_puppets_are_online_while_the_bridge_runs_say_they_answer_and_go_offline(
    homeserver, bridge_factory, tmp_path
):
    release = tmp_path / "release"
    running = await bridge_factory({"alice": agent("--answer", "done")})
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)

    async def presence_of(user_id):
        status, body = await request(homeserver, owner, "GET", f"/_matrix/client/v3/presence/{quote(user_id)}/status")
        assert status == 200, body
        return body

    try:
        dm = await owner.room_create(is_direct=True, invite=[ALICE], preset=nio.RoomPreset.trusted_private_chat)
        assert isinstance(dm, nio.RoomCreateResponse), dm
        await sync_until(owner, lambda: joined(owner, dm.room_id, ALICE))

        async def online():
            return (await presence_of(ALICE)).get("presence") == "online"

        await wait_until(online, what="alice online")

        await say(owner, dm.room_id, f"work [[hold:{release}]]")

        async def busy():
            return (await presence_of(ALICE)).get("status_msg") == "answering"

        await wait_until(busy, what="alice says she answers, not where (presence names no room)")
        release.touch()
        await running.idle()

        async def free():
            body = await presence_of(ALICE)
            return body.get("presence") == "online" and not body.get("status_msg")

        await wait_until(free, what="alice's status message gone after her turn")

        await running.stop()
        assert (await presence_of(ALICE)).get("presence") == "offline"
    finally:
        await owner.close()
