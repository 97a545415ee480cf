"""Bridge commands end to end (docs/architecture.md "The Matrix side"): the bot's DM, `!` commands
there and in channels, the space.

Real Synapse, the owner's matrix-nio client, the real bridge in-process, scripted agents.
"""

from __future__ import annotations

import json
import re
import secrets
import sys

import nio
import pytest
from bridge_harness import agent, answers_in
from bridge_harness import wait_until as until
from helpers import say
from matrix_helpers import WHOLE_TIMELINE, events_in, notice_events, notices, sync_until

BOT, ALICE, BOB = "@sidekicks:localhost", "@sk_alice:localhost", "@sk_bob:localhost"
LINK = re.compile(r"https://matrix\.to/#/(![^?\s]+)")


def logged(log_path) -> list[dict]:
    if not log_path.exists():
        return []
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


def methods(log_path) -> list[str]:
    return [m.get("method") for m in logged(log_path) if m.get("method")]


def membership_of(client, room_id, user_id) -> str | None:
    state = [
        e for e in events_in(client, room_id) if e.get("type") == "m.room.member" and e.get("state_key") == user_id
    ]
    return state[-1]["content"].get("membership") if state else None


async def command(owner, room_id: str, text: str, sender: str = BOT, timeout: float = 60) -> str:
    """Send `text` and return the next notice `sender` posts in the room."""
    before = len(notices(owner, room_id, sender))
    await say(owner, room_id, text)
    await sync_until(owner, lambda: len(notices(owner, room_id, sender)) > before, timeout=timeout)
    return notices(owner, room_id, sender)[before]


async def open_bot_dm(owner) -> str:
    response = await owner.room_create(is_direct=True, invite=[BOT], preset=nio.RoomPreset.trusted_private_chat)
    assert isinstance(response, nio.RoomCreateResponse), response
    await sync_until(owner, lambda: notices(owner, response.room_id, BOT))
    return response.room_id


async def room_with(owner, *puppets: str, name: str = "general", direct: bool = False) -> str:
    response = await owner.room_create(
        name=None if direct else name,
        invite=list(puppets),
        is_direct=direct,
        preset=nio.RoomPreset.trusted_private_chat if direct else nio.RoomPreset.private_chat,
    )
    assert isinstance(response, nio.RoomCreateResponse), response
    await sync_until(owner, lambda: all(membership_of(owner, response.room_id, p) == "join" for p in puppets))
    return response.room_id


def final(answer: dict) -> bool:
    body = answer["body"]
    return "getting ready" not in body and not body.startswith(("💭", "✍️", "🔧", "⏳"))


async def wait_answer(owner, room_id, puppet_id, count=1, timeout=60) -> list[dict]:
    def done():
        answers = [a for a in answers_in(events_in(owner, room_id), puppet_id) if a["msgtype"] != "m.notice"]
        return len(answers) >= count and all(final(a) for a in answers[:count])

    await sync_until(owner, done, timeout=timeout)
    return [a for a in answers_in(events_in(owner, room_id), puppet_id) if a["msgtype"] != "m.notice"]


async def join_invited(owner, room_id: str) -> None:
    await sync_until(owner, lambda: room_id in owner.invited_rooms or room_id in owner.rooms)
    if room_id not in owner.rooms:
        assert isinstance(await owner.join(room_id), nio.JoinResponse)
    await sync_until(owner, lambda: room_id in owner.rooms)


async def state_of(client, room_id: str) -> list[dict]:
    response = await client.room_get_state(room_id)
    assert isinstance(response, nio.RoomGetStateResponse), response
    return response.events


def readable_by_every_client(room_id: str, state: list[dict]) -> bool:
    """Made as version 10 (bridge/local/homeserver.py): an id with `:server` and a `creator` in
    m.room.create, which nheko 0.11 needs (version 12 has neither, 11 no `creator`)."""
    [create] = [e["content"] for e in state if e["type"] == "m.room.create"]
    return (
        room_id.endswith(":localhost")
        and create.get("room_version") == "10"
        and create.get("creator", "").startswith("@")
    )


async def test_bot_dm_greets_and_help_teaches_both_ways(homeserver, bridge_factory, owner):
    running = await bridge_factory({"alice": agent(title="Alice")})
    dm = await open_bot_dm(owner)
    greeting = notices(owner, dm, BOT)[0]
    assert "!help" in greeting and "!new" in greeting
    assert running.store.get_value(f"bot_dm:{homeserver.owner_id}") == dm
    await command(owner, dm, "!help")  # what to do here, in a few lines, as HTML
    short = notice_events(owner, dm, BOT)[-1]["content"]
    assert short["format"] == "org.matrix.custom.html" and "<li>" in short["formatted_body"]
    assert len(short["body"].splitlines()) <= 8 and "!new" in short["body"] and "!help all" in short["body"]
    help_text = await command(owner, dm, "!help all")
    for part in (
        "!agents",
        "!channels",
        "!new NAME AGENT",
        "!dm AGENT",
        "!delete CHANNEL",
        "!stop",
        "!commands",
        "/alice:review",
        "@alice /review",
        "//alice:review",
    ):
        assert part in help_text, part
    assert "There is no !frobnicate" in await command(owner, dm, "!frobnicate")
    assert running.store.channels() == []


async def test_the_bot_marks_read_the_commands_in_its_dm(homeserver, bridge_factory, owner):
    """A command in the bot's DM gets the bot's read receipt (it used to get none: the owner
    could not tell whether the bridge had seen it)."""
    from test_strangers import read_receipts

    await bridge_factory({"alice": agent(title="Alice")})
    dm = await open_bot_dm(owner)
    before = len(notices(owner, dm, BOT))
    sent = await say(owner, dm, "!agents")
    await sync_until(owner, lambda: len(notices(owner, dm, BOT)) > before)

    async def read_by_bot() -> bool:
        return (await read_receipts(homeserver, owner.access_token, dm)).get(BOT) == sent

    await sync_until(owner, read_by_bot)


async def test_tell_owners_makes_a_bot_dm_when_there_is_none(homeserver, bridge_factory, owner):
    running = await bridge_factory({"alice": agent(title="Alice")})
    await owner.sync(timeout=0, sync_filter=WHOLE_TIMELINE)
    await running.bridge.commands.tell_owners("history is unavailable")
    dm = running.store.get_value(f"bot_dm:{homeserver.owner_id}")
    assert dm is not None
    await join_invited(owner, dm)
    await sync_until(owner, lambda: notices(owner, dm, BOT) == ["history is unavailable"])
    state = await state_of(owner, dm)
    assert [e["sender"] for e in state if e["type"] == "m.room.create"] == [BOT]
    assert readable_by_every_client(dm, state)
    assert not [e for e in state if e["type"] == "m.room.encryption"]
    # the DM is kept: the next word goes there, and commands work in it
    await running.bridge.commands.tell_owners("again")
    await sync_until(owner, lambda: notices(owner, dm, BOT) == ["history is unavailable", "again"])
    assert "alice — Alice — stopped" in await command(owner, dm, "!agents")
    # once the owner leaves it, a new DM is made
    assert isinstance(await owner.room_leave(dm), nio.RoomLeaveResponse)
    await running.bridge.commands.tell_owners("third")
    fresh = running.store.get_value(f"bot_dm:{homeserver.owner_id}")
    assert fresh not in (None, dm)
    await join_invited(owner, fresh)
    await sync_until(owner, lambda: notices(owner, fresh, BOT) == ["third"])


async def test_agents_shows_stopped_then_ready(bridge_factory, owner):
    running = await bridge_factory({"alice": agent(title="Alice"), "bob": agent(title="Bob")})
    dm = await open_bot_dm(owner)
    listing = await command(owner, dm, "!agents")
    assert "alice — Alice — stopped" in listing and "bob — Bob — stopped" in listing
    room = await room_with(owner, ALICE, direct=True)
    await say(owner, room, "hello")
    await wait_answer(owner, room, ALICE)
    listing = await command(owner, dm, "!agents")
    assert "alice — Alice — ready" in listing and "bob — Bob — stopped" in listing
    assert running.bridge.pool.state("alice") == "ready"


async def test_new_makes_an_unencrypted_channel_in_the_space(bridge_factory, owner):
    running = await bridge_factory({"alice": agent(title="Alice"), "bob": agent(title="Bob")})
    dm = await open_bot_dm(owner)
    reply = await command(owner, dm, '!new "code review" alice @bob')
    room = LINK.search(reply).group(1)
    # the room gets the local alias its name gives, and the answer links it by that alias
    alias = "#code-review:localhost"
    assert reply.startswith(f"Made {alias} with alice, bob:"), reply
    made = notice_events(owner, dm, BOT)[-1]["content"]
    assert f'<a href="https://matrix.to/#/{alias}">{alias}</a>' in made["formatted_body"]
    found = await owner.room_resolve_alias(alias)
    assert isinstance(found, nio.RoomResolveAliasResponse) and found.room_id == room
    # the alias is taken now: the next room of that name has none, and no "#" is written
    again = await command(owner, dm, '!new "Code Review" alice')
    assert again.startswith("Made “Code Review” with alice:"), again
    again_html = notice_events(owner, dm, BOT)[-1]["content"]["formatted_body"]
    assert f'<a href="https://matrix.to/#/{LINK.search(again).group(1)}' in again_html and "#code" not in again_html
    channel = running.store.channel_by_room(room)
    assert channel is not None and channel.name == "code review" and channel.direct_agent is None
    assert [m.agent for m in running.store.members(channel.id)] == ["alice", "bob"]
    await join_invited(owner, room)
    await sync_until(owner, lambda: membership_of(owner, room, ALICE) == membership_of(owner, room, BOB) == "join")
    state = await state_of(owner, room)
    assert not [e for e in state if e["type"] == "m.room.encryption"]
    assert [e["content"]["name"] for e in state if e["type"] == "m.room.name"] == ["code review"]
    assert readable_by_every_client(room, state)
    space = running.store.get_value("space")
    assert [e["state_key"] for e in state if e["type"] == "m.space.parent"] == [space]
    await join_invited(owner, space)
    space_state = await state_of(owner, space)
    assert [e["content"].get("type") for e in space_state if e["type"] == "m.room.create"] == ["m.space"]
    assert readable_by_every_client(space, space_state)
    children = {e["state_key"]: e["content"] for e in space_state if e["type"] == "m.space.child"}
    assert children[room] == {"via": ["localhost"]}
    # the channel works, and !channels lists it with its members
    await say(owner, room, "@bob hi")
    assert (await wait_answer(owner, room, BOB))[0]["body"] == "echo: @bob hi"
    listing = await command(owner, dm, "!channels")
    assert f"#code review — alice, bob — https://matrix.to/#/{room}" in listing
    # a channel made by inviting a puppet joins the space too
    other = await room_with(owner, ALICE, name="elsewhere")
    await sync_until(
        owner,
        lambda: any(e.get("type") == "m.space.child" and e.get("state_key") == other for e in events_in(owner, space)),
    )
    assert "Usage: !new" in await command(owner, dm, "!new lonely")
    assert "No agent called carol" in await command(owner, dm, "!new x carol")
    assert len(running.store.channels()) == 3  # code review twice, elsewhere


async def test_dm_command_opens_a_direct_channel_made_by_the_puppet(homeserver, bridge_factory, owner):
    running = await bridge_factory({"alice": agent(title="Alice")})
    dm = await open_bot_dm(owner)
    reply = await command(owner, dm, "!dm alice")
    room = LINK.search(reply).group(1)
    channel = running.store.channel_by_room(room)
    assert channel is not None and channel.direct_agent == "alice"
    await join_invited(owner, room)
    state = await state_of(owner, room)
    assert [e["sender"] for e in state if e["type"] == "m.room.create"] == [ALICE]
    assert readable_by_every_client(room, state)
    assert not [e for e in state if e["type"] == "m.room.encryption"]
    history = await owner.room_messages(room, start="", direction=nio.MessageDirection.back, limit=50)
    assert isinstance(history, nio.RoomMessagesResponse), history
    invite = [
        e.source
        for e in history.chunk
        if e.source.get("type") == "m.room.member"
        and e.source.get("state_key") == homeserver.owner_id
        and e.source["content"].get("membership") == "invite"
    ]
    assert invite[0]["sender"] == ALICE and invite[0]["content"].get("is_direct") is True
    await say(owner, room, "hello there")
    assert (await wait_answer(owner, room, ALICE))[0]["body"] == "echo: hello there"
    again = await command(owner, dm, "!dm alice")
    assert LINK.search(again).group(1) == room and "Your direct channel" in again
    assert "Usage: !dm" in await command(owner, dm, "!dm carol")
    assert len(running.store.channels()) == 1


async def test_delete_from_the_bot_dm_needs_confirmation(bridge_factory, owner):
    running = await bridge_factory({"alice": agent(title="Alice")})
    dm = await open_bot_dm(owner)
    room = await room_with(owner, ALICE, name="doomed")
    await say(owner, room, "hi")
    await wait_answer(owner, room, ALICE)
    await running.idle()  # the turns are over: answers stored, nothing more to come
    channel = running.store.channel_by_room(room)
    assert running.store.count_messages(channel.id) == 2
    asked = await command(owner, dm, "!delete doomed")
    assert "!delete doomed confirm" in asked and "2 messages" in asked
    assert running.store.channel_by_room(room) == channel
    assert running.store.count_messages(channel.id) == 2
    assert "no channel #nowhere" in await command(owner, dm, "!delete nowhere confirm")
    done = await command(owner, dm, "!delete doomed confirm")
    assert done.startswith("Deleted #doomed")
    assert running.store.channel_by_room(room) is None
    assert running.store.count_messages(channel.id) == 0
    assert running.store.members(channel.id) == []
    await sync_until(owner, lambda: membership_of(owner, room, ALICE) == "leave")
    # the room stays the owner's; a message there reaches nobody
    await say(owner, room, "anyone?")
    assert "#doomed" not in await command(owner, dm, "!channels")
    assert running.store.count_messages() == 0


async def test_delete_in_a_channel_needs_confirmation(bridge_factory, owner):
    running = await bridge_factory({"alice": agent(title="Alice"), "bob": agent(title="Bob")})
    room = await room_with(owner, ALICE, BOB)
    await say(owner, room, "@alice hi")
    await wait_answer(owner, room, ALICE)
    await running.idle()  # the turns are over: answers stored, nothing more to come
    channel = running.store.channel_by_room(room)
    asked = await command(owner, room, "!delete", sender=ALICE)
    assert "!delete confirm" in asked and "2 messages" in asked
    assert running.store.count_messages(channel.id) == 2
    assert running.store.channel_by_room(room) == channel
    said = await command(owner, room, "!delete confirm", sender=ALICE)
    assert said.startswith("Deleted the history of #general")
    # said first, then done (on the database thread): wait for it, then it is all gone
    await until(lambda: running.store.channel_by_room(room) is None)
    assert running.store.count_messages(channel.id) == 0
    await sync_until(owner, lambda: membership_of(owner, room, ALICE) == membership_of(owner, room, BOB) == "leave")


async def test_stop_cancels_the_running_answer(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log), title="Alice")})
    room = await room_with(owner, ALICE, direct=True)
    assert await command(owner, room, "!stop", sender=ALICE) == "Nothing is being answered here."
    # the answer streams its first part, then waits for a file never made: only !stop ends it
    held = f"[[chunks:2]] [[hold:{tmp_path / 'never'}]] count slowly"
    await say(owner, room, held)
    await sync_until(owner, lambda: any("echo" in a["body"] for a in answers_in(events_in(owner, room), ALICE)))
    await say(owner, room, "!stop")
    answers = await wait_answer(owner, room, ALICE)
    assert answers[0]["body"].endswith("⏹ stopped") and "count slowly" not in answers[0]["body"]
    assert "session/cancel" in methods(log)
    channel = running.store.channel_by_room(room)
    assert [m.text for m in running.store.last_messages(channel.id, 10)][0] == held
    assert not [m for m in running.store.last_messages(channel.id, 10) if m.text == "!stop"]


async def test_commands_lists_announced_and_starts_the_silent(bridge_factory, tmp_path, owner):
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    running = await bridge_factory(
        {
            "alice": agent("--commands", "review:Review:file", "--log", str(logs["alice"]), title="Alice"),
            "bob": agent("--log", str(logs["bob"]), title="Bob"),
        }
    )
    running.store.set_agent_commands("bob", [{"name": "summarize", "description": "Summarize"}])
    room = await room_with(owner, ALICE, BOB)
    channel = running.store.channel_by_room(room)
    assert running.bridge.pool.state("alice") == "stopped"
    listing = await command(owner, room, "!commands", sender=ALICE)
    assert "/alice:review <file> — Review" in listing
    assert "/bob:summarize — Summarize" in listing
    assert running.bridge.pool.state("alice") == "ready"
    assert running.bridge.pool.state("bob") == "stopped" and methods(logs["bob"]) == []
    assert methods(logs["alice"]).count("session/new") == 1
    member = running.store.member(channel.id, "alice")
    assert member.session_id and member.fresh
    # the session is kept for the first answer (no second session/new)
    await say(owner, room, "/alice:review main.py")
    await wait_answer(owner, room, ALICE)
    assert methods(logs["alice"]).count("session/new") == 1
    prompt = [m for m in logged(logs["alice"]) if m.get("method") == "session/prompt"][0]
    assert prompt["params"]["sessionId"] == member.session_id
    assert "There is no !nope here" in await command(owner, room, "!nope", sender=ALICE)


async def test_a_channels_help_is_short_html_for_this_room_and_help_all_has_the_rest(bridge_factory, owner):
    """docs/commands.md "In a channel": `!help` in a channel answers "what can I do here" in a
    few lines (its agents' names, no bot commands); `!help all` lists every channel command."""
    await bridge_factory({"alice": agent(title="Alice"), "bob": agent(title="Bob")})
    room = await room_with(owner, ALICE, BOB, name="test")
    await command(owner, room, "!help", sender=ALICE)
    shown = notice_events(owner, room, ALICE)[-1]["content"]
    assert shown["format"] == "org.matrix.custom.html" and "<code>@alice hello</code>" in shown["formatted_body"]
    lines = shown["body"].splitlines()
    assert lines[0] == "What you can do in #test:" and len(lines) <= 12, shown["body"]
    assert "`" not in shown["body"] and not any(bot in shown["body"] for bot in ("!new", "!dm", "!agents"))
    every = await command(owner, room, "!help all", sender=ALICE)
    assert "!sessions [AGENT]" in every and "!budget channel" in every and "!dm AGENT" not in every


async def test_strangers_commands_change_nothing(homeserver, bridge_factory, owner, stranger):
    running = await bridge_factory({"alice": agent(title="Alice")})
    # a stranger's invite of the bot is declined
    response = await stranger.room_create(is_direct=True, invite=[BOT])
    assert isinstance(response, nio.RoomCreateResponse), response
    await sync_until(stranger, lambda: membership_of(stranger, response.room_id, BOT) == "leave")
    assert not notices(stranger, response.room_id, BOT)
    # in the owner's bot DM and in a channel, a stranger's ! commands do nothing
    dm = await open_bot_dm(owner)
    room = await room_with(owner, ALICE)
    for target in (dm, room):
        await owner.room_invite(target, homeserver.stranger_id)
        assert isinstance(await stranger.join(target), nio.JoinResponse)
    await say(stranger, dm, "!new hijack alice")
    await say(stranger, dm, "!delete general confirm")
    await say(stranger, room, "!delete confirm")
    await say(stranger, room, "!commands")
    assert "#general" in await command(owner, dm, "!channels")  # a barrier: all handled by now
    await say(owner, room, "hi")
    await wait_answer(owner, room, ALICE)
    await running.idle()  # the turns are over: answers stored, nothing more to come
    channel = running.store.channel_by_room(room)
    assert [c.room_id for c in running.store.channels()] == [room]
    assert running.store.count_messages(channel.id) == 2
    assert len(notices(owner, dm, BOT)) == 2  # the greeting and !channels only
    assert notices(owner, room, ALICE) == []
    assert running.bridge.pool.state("alice") == "ready"


async def test_a_new_owner_is_welcomed_once_and_one_who_left_is_not_invited_again(
    homeserver, bridge_factory, tmp_path, owner
):
    """docs/using.md "The first minutes": at `sidekicks up` (its start calls `welcome`) the bot
    opens its DM with the owner, with a welcome, and a direct channel with the first agent;
    once: a restart makes none, and rooms the owner left are not made again."""
    folder = tmp_path / "bridge"
    agents = {"alice": agent(title="Alice"), "bob": agent(title="Bob")}
    running = await bridge_factory(agents, folder=folder)
    await running.bridge.commands.welcome()
    dm = running.store.get_value(f"bot_dm:{homeserver.owner_id}")
    [channel] = running.store.channels()
    assert channel.direct_agent == "alice"  # the first agent's direct channel
    await join_invited(owner, dm)
    await join_invited(owner, channel.room_id)
    await sync_until(owner, lambda: notice_events(owner, dm, BOT))
    [welcome] = [e["content"] for e in notice_events(owner, dm, BOT)]
    assert welcome["body"].startswith("Welcome to Sidekicks") and "!help" in welcome["body"]
    assert f'href="https://matrix.to/#/{channel.room_id}' in welcome["formatted_body"]
    await running.bridge.commands.welcome()  # again, in the same run: nothing new
    await running.stop()

    running = await bridge_factory(agents, folder=folder)  # a restart
    await running.bridge.commands.welcome()
    assert [c.room_id for c in running.store.channels()] == [channel.room_id]
    assert running.store.get_value(f"bot_dm:{homeserver.owner_id}") == dm
    for room_id in (dm, channel.room_id):  # the owner leaves both (done once the server answers)
        assert isinstance(await owner.room_leave(room_id), nio.RoomLeaveResponse)
    await running.stop()

    running = await bridge_factory(agents, folder=folder)
    await running.bridge.commands.welcome()
    assert [c.room_id for c in running.store.channels()] == [channel.room_id]  # no new direct channel
    assert running.store.get_value(f"bot_dm:{homeserver.owner_id}") == dm  # no new DM
    assert len(notice_events(owner, dm, BOT)) == 1


async def test_the_bot_and_each_puppet_get_an_avatar_once(homeserver, bridge_factory, tmp_path, owner):
    """docs/using.md "The first minutes": a generated avatar per puppet and for the bot, uploaded
    once and kept in the store; a restart uploads nothing and keeps the profile's avatar."""
    folder = tmp_path / "bridge"
    name = f"painted{secrets.token_hex(3)}"  # a puppet no earlier bridge on this Synapse made
    puppet = f"@sk_{name}:localhost"
    agents = {name: agent(title="Painted")}

    async def avatar_of(user_id: str) -> str | None:
        found = await owner.get_avatar(user_id)
        return found.avatar_url if isinstance(found, nio.ProfileGetAvatarResponse) else None

    async def settled(running) -> None:  # the start's avatar task is done
        await until(lambda: not any(t.get_name() == "avatars" for t in running.bridge.commands.tasks))

    running = await bridge_factory(agents, folder=folder)
    await settled(running)
    stored = running.store.get_value(f"avatar:{puppet}")
    assert stored and stored.startswith("mxc://localhost/")
    assert await avatar_of(puppet) == stored
    assert (await avatar_of(BOT) or "").startswith("mxc://")  # the bot has one (this bridge's or an earlier one's)
    await running.stop()

    running = await bridge_factory(agents, folder=folder)  # a restart: nothing uploaded again
    await settled(running)
    assert running.store.get_value(f"avatar:{puppet}") == stored
    assert await avatar_of(puppet) == stored


@pytest.mark.model
async def test_status_shows_the_local_agents_context_and_what_it_did_not_report(bridge_factory, tmp_path, owner):
    """docs/commands.md "In a channel": `!status` shows the context the shipped local agent
    reports, says what it does not report, names no session id unless asked (`!status ids`)."""
    local = "@sk_local:localhost"
    sessions = tmp_path / "sessions"
    command_line = [sys.executable, "-m", "acp.agents.local_model", "--sessions", str(sessions), "--max-tokens", "16"]
    await bridge_factory({"local": {"command": command_line, "title": "Local"}})
    room = await room_with(owner, local, direct=True)
    await say(owner, room, "Say hello.")
    await wait_answer(owner, room, local, timeout=180)
    shown = await command(owner, room, "!status", sender=local)
    assert re.search(r"Local: ready · context \d+/8.2k \(\d+%\) · no model or cost reported by this agent$", shown), (
        shown
    )
    assert "session" not in shown
    member = await command(owner, room, "!status ids", sender=local)
    assert re.search(r"· session \S+$", member), member
