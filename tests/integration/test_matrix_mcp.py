"""The bridge's MCP server `matrix` (SPEC §16, issue 30), end to end: a real Synapse, the real
bridge, the owner's matrix-nio client, and a scripted agent (tests/agents/mcp_agent.py) that
starts the stdio server from the `mcpServers` entry it got in session/new with the official MCP
client and calls a tool on a directive in the prompt, answering with the tool's result.
"""
from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import nio

from bridge_harness import answers_in, wait_until
from helpers import received, say
from matrix_helpers import caught_up, events_in, notices, sync_until
from store.ids import now_ms

MCP_AGENT = Path(__file__).resolve().parents[1] / "agents" / "mcp_agent.py"
ALICE = "@sk_alice:localhost"


def mcp_agent(log: Path, workdir: Path | None = None, *options: str, **extra) -> dict:
    entry = {"command": [sys.executable, str(MCP_AGENT), "--log", str(log), *options], "title": "Alice"}
    if workdir is not None:
        entry["cwd"] = str(workdir)
    entry.update(extra)
    return entry


def answers(owner, room_id: str) -> list[str]:
    """alice's final messages in the room, oldest first (status lines still streaming left out)."""
    return [m["body"] for m in answers_in(events_in(owner, room_id), ALICE)
            if m.get("msgtype") in ("m.text", None) and not m["body"].startswith(("⏳", "💭", "✍️", "🔧"))]


async def ask(owner, room_id: str, body: str, starts: str) -> str:
    """Send `body`, wait for alice's answer starting with `starts`, return it."""
    before = len(answers(owner, room_id))
    await say(owner, room_id, body)
    await sync_until(owner, lambda: any(a.startswith(starts) for a in answers(owner, room_id)[before:]))
    return next(a for a in answers(owner, room_id)[before:] if a.startswith(starts))


async def channel_with_alice(owner, name: str) -> str:
    response = await owner.room_create(name=name, invite=[ALICE])
    assert isinstance(response, nio.RoomCreateResponse), response
    room_id = response.room_id

    def joined():
        return any(e.get("type") == "m.room.member" and e.get("state_key") == ALICE
                   and e["content"].get("membership") == "join" for e in events_in(owner, room_id))
    await sync_until(owner, joined)
    return room_id


async def test_history_is_this_rooms_messages_and_no_other_rooms(bridge_factory, tmp_path, owner):
    log, work = tmp_path / "alice.log", tmp_path / "work"
    work.mkdir()
    running = await bridge_factory({"alice": mcp_agent(log, work)})
    here = await channel_with_alice(owner, "here")
    elsewhere = await channel_with_alice(owner, "elsewhere")
    await ask(owner, here, "the apple is red", "echo:")
    await ask(owner, elsewhere, "the banana is yellow", "echo:")
    result = await ask(owner, here, '[[tool:history {"limit": 10}]]', "history")
    assert result.startswith("history: ")
    assert "the apple is red" in result and "echo: the apple is red" in result
    assert "banana" not in result
    # a query, and the newest last
    found = await ask(owner, here, '[[tool:history {"query": "APPLE"}]]', "history")
    lines = found.removeprefix("history: ").splitlines()
    assert "the apple is red" in found and "banana" not in found
    assert lines[-1].endswith('[[tool:history {"query": "APPLE"}]]')  # newest last
    # the session got the matrix server over stdio, its secret in env; the socket is private
    news = [m for m in received(log) if m.get("method") == "session/new"]
    assert news
    (entry,) = news[0]["params"]["mcpServers"]
    assert entry["name"] == "matrix" and entry["args"] == ["-m", "bridge", "mcp"]
    env = {e["name"]: e["value"] for e in entry["env"]}
    socket_path = Path(env["SIDEKICKS_MCP_SOCKET"])
    assert len(env["SIDEKICKS_MCP_SECRET"]) == 64
    assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(socket_path.parent).st_mode) == 0o700
    # the other room's session has another secret
    secrets = {next(e["value"] for e in m["params"]["mcpServers"][0]["env"] if e["name"] == "SIDEKICKS_MCP_SECRET")
               for m in news}
    assert len(secrets) == 2
    await running.idle()


async def test_send_file_posts_a_file_of_the_working_directory_and_refuses_one_outside(
        bridge_factory, tmp_path, owner):
    log, work, outside = tmp_path / "alice.log", tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "notes.txt").write_text("the notes\n")
    (outside / "secret.txt").write_text("not for the room\n")
    running = await bridge_factory({"alice": mcp_agent(log, work)})
    room = await channel_with_alice(owner, "files")
    posted = await ask(owner, room, '[[tool:send_file {"path": "notes.txt", "caption": "here they are"}]]',
                       "send_file")
    assert posted.startswith("send_file: Posted notes.txt"), posted
    files = [e for e in events_in(owner, room) if e.get("sender") == ALICE
             and e["content"].get("msgtype") == "m.file"]
    assert [f["content"]["body"] for f in files] == ["notes.txt"]
    assert files[0]["content"]["info"]["size"] == len("the notes\n")
    refused = await ask(owner, room, '[[tool:send_file {"path": "%s"}]]' % (outside / "secret.txt"),
                        "send_file")
    assert refused.startswith("send_file error: ") and "outside the agent's working directory" in refused
    up = await ask(owner, room, '[[tool:send_file {"path": "../outside/secret.txt"}]]', "send_file")
    assert "outside the agent's working directory" in up
    await running.idle()
    await caught_up(owner, room)
    files = [e for e in events_in(owner, room) if e.get("sender") == ALICE
             and e["content"].get("msgtype") == "m.file"]
    assert len(files) == 1  # nothing posted for the refused ones
    assert "here they are" in [m["body"] for m in answers_in(events_in(owner, room), ALICE)]


async def test_react_on_a_message_of_this_room_only(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    room = await channel_with_alice(owner, "reactions")
    other = await channel_with_alice(owner, "other")
    mine = await say(owner, room, "react to me")
    theirs = await say(owner, other, "not this one")
    await running.idle()
    done = await ask(owner, room, '[[tool:react {"event_id": "' + mine + '", "key": "👍"}]]', "react")
    assert done.startswith("react: Reacted"), done
    await sync_until(owner, lambda: any(
        e.get("type") == "m.reaction" and e.get("sender") == ALICE
        and e["content"]["m.relates_to"]["event_id"] == mine for e in events_in(owner, room)))
    refused = await ask(owner, room, '[[tool:react {"event_id": "' + theirs + '", "key": "👍"}]]', "react")
    assert refused.startswith("react error:") and "no message" in refused
    await running.idle()
    await caught_up(owner, other)
    assert not [e for e in events_in(owner, other) if e.get("type") == "m.reaction"]


def runs(owner, room_id: str, prompt: str) -> list[str]:
    return [n for n in notices(owner, room_id, ALICE) if n.startswith(f"⏰ alice scheduled: {prompt}")]


def clock_moved_on(running, seconds: float) -> None:
    """The bridge's scheduler sees the time `seconds` ahead from now on (its clock; nothing else's),
    and looks at its schedules at once: a test need not wait for real time to pass."""
    scheduler = running.bridge.scheduler
    ahead = int(seconds * 1000)
    scheduler.clock = lambda: now_ms() + ahead
    scheduler.changed()


async def test_schedule_runs_once_and_cancel_stops_one(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    room = await channel_with_alice(owner, "later")
    # an hour ahead: still listed, and the second cancelled before its time, however slow the
    # machine; then the scheduler's clock is moved on instead of waiting
    made = await ask(owner, room, '[[tool:schedule {"prompt": "time to stretch", "in_seconds": 3600}]]',
                     "schedule")
    assert made.startswith("schedule: Scheduled as id 1"), made
    cancelled = await ask(owner, room, '[[tool:schedule {"prompt": "never said", "in_seconds": 3700}]]',
                          "schedule")
    assert "id 2" in cancelled
    listed = await ask(owner, room, "[[tool:schedules]]", "schedules")
    assert "id 1" in listed and "time to stretch" in listed and "id 2" in listed
    gone = await ask(owner, room, '[[tool:cancel_schedule {"id": 2}]]', "cancel_schedule")
    assert gone.startswith("cancel_schedule: Cancelled schedule 2"), gone
    # a later one, as a barrier: once it has run, the cancelled one's time has long passed
    await ask(owner, room, '[[tool:schedule {"prompt": "the barrier", "in_seconds": 3800}]]', "schedule")
    assert runs(owner, room, "time to stretch") == []  # not before its time
    clock_moved_on(running, 3650)
    await sync_until(owner, lambda: "echo: time to stretch" in answers(owner, room))
    clock_moved_on(running, 3900)
    await sync_until(owner, lambda: "echo: the barrier" in answers(owner, room))
    await running.idle()
    await caught_up(owner, room)
    assert len(runs(owner, room, "time to stretch")) == 1
    assert answers(owner, room).count("echo: time to stretch") == 1
    assert runs(owner, room, "never said") == [] and "echo: never said" not in answers(owner, room)
    prompts = [m for m in received(log) if m.get("method") == "session/prompt"
               and "time to stretch" in m["params"]["prompt"][0]["text"]
               and "[[tool:" not in m["params"]["prompt"][0]["text"].splitlines()[-1]]
    assert len(prompts) == 1
    assert running.store.schedules.listed(running.store.channel_by_room(room).id) == []
    # the owner sees none left
    await say(owner, room, "!schedules")
    await sync_until(owner, lambda: any(n.startswith("Nothing is scheduled here") for n in notices(owner, room, ALICE)))


async def test_a_run_due_while_the_bridge_was_down_runs_once_at_the_start_saying_it_is_late(
        bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    agents = {"alice": mcp_agent(log, tmp_path)}
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    room = await channel_with_alice(owner, "restart")
    made = await ask(owner, room, '[[tool:schedule {"prompt": "wake up", "in_seconds": 12}]]', "schedule")
    assert "id 1" in made
    await running.idle()
    channel_id = running.store.channel_by_room(room).id
    (schedule,) = running.store.schedules.listed(channel_id)
    await running.stop()
    await wait_until(lambda: time.time() * 1000 > schedule.due + 500, what="the run is due")
    running = await bridge_factory(agents, folder=folder)
    await sync_until(owner, lambda: "echo: wake up" in answers(owner, room))
    await running.idle()
    await caught_up(owner, room)
    (line,) = runs(owner, room, "wake up")
    assert "late: it was due at" in line
    assert answers(owner, room).count("echo: wake up") == 1
    assert running.store.schedules.listed(channel_id) == []
    # a second start takes nothing again
    await running.stop()
    running = await bridge_factory(agents, folder=folder)
    await say(owner, room, "still there?")
    await sync_until(owner, lambda: "echo: still there?" in answers(owner, room))
    await caught_up(owner, room)
    assert len(runs(owner, room, "wake up")) == 1 and answers(owner, room).count("echo: wake up") == 1


async def test_tools_off_gives_the_session_no_mcp_servers(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path, tools="off")})
    room = await channel_with_alice(owner, "no tools")
    assert await ask(owner, room, "[[tools]]", "tools") == "tools: none"
    (new,) = [m for m in received(log) if m.get("method") == "session/new"]
    assert new["params"]["mcpServers"] == []
    assert not running.bridge.mcp.running
    await running.idle()


async def test_the_owner_lists_and_cancels_schedules_and_a_stranger_can_do_neither(
        homeserver, bridge_factory, tmp_path, owner, stranger):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    response = await owner.room_create(name="shared", invite=[ALICE, homeserver.stranger_id])
    room = response.room_id
    assert isinstance(await stranger.join(room), nio.JoinResponse)
    await sync_until(owner, lambda: any(e.get("type") == "m.room.member" and e.get("state_key") == ALICE
                                        and e["content"].get("membership") == "join"
                                        for e in events_in(owner, room)))
    await ask(owner, room, '[[tool:schedule {"prompt": "far away", "cron": "0 3 1 1 *"}]]', "schedule")
    await ask(owner, room, '[[tool:schedule {"prompt": "also later", "in_seconds": 3600}]]', "schedule")
    await running.idle()
    seen = len(notices(owner, room, ALICE))
    for attempt in ("!schedules", "!unschedule 1", "[[tool:cancel_schedule {\"id\": 2}]]"):
        sent = await stranger.room_send(room, "m.room.message", {"msgtype": "m.text", "body": attempt})
        await running.handled(sent.event_id)
    await running.idle()
    await caught_up(owner, room)
    assert len(notices(owner, room, ALICE)) == seen  # no listing, no cancelling, for the stranger
    channel_id = running.store.channel_by_room(room).id
    assert [s.prompt for s in running.store.schedules.listed(channel_id)] == ["far away", "also later"]
    await say(owner, room, "!schedules")
    await sync_until(owner, lambda: any(n.startswith("Scheduled here:") for n in notices(owner, room, ALICE)))
    listing = next(n for n in notices(owner, room, ALICE) if n.startswith("Scheduled here:"))
    assert "1. alice, next at" in listing and "then on cron 0 3 1 1 *: far away" in listing
    assert "2. alice" in listing and "also later" in listing
    await say(owner, room, "!unschedule 1")
    await sync_until(owner, lambda: any(n.startswith("Cancelled schedule 1 of alice: far away")
                                        for n in notices(owner, room, ALICE)))
    assert [s.prompt for s in running.store.schedules.listed(channel_id)] == ["also later"]
    await say(owner, room, "!unschedule 9")
    await sync_until(owner, lambda: any(n.startswith("There is no schedule 9 here") for n in notices(owner, room, ALICE)))


async def test_an_agent_announcing_http_gets_the_server_over_http_too(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path, "--http")})
    room = await channel_with_alice(owner, "over http")
    await ask(owner, room, "a cherry", "echo:")
    result = await ask(owner, room, '[[tool:history {"limit": 5}]]', "history")
    assert "a cherry" in result
    (new,) = [m for m in received(log) if m.get("method") == "session/new"]
    stdio, http = new["params"]["mcpServers"]
    assert "command" in stdio and http["type"] == "http" and http["name"] == "matrix"
    assert http["url"].startswith("http://127.0.0.1:")
    assert [r["via"] for r in received(log) if "tool" in r] == ["http"]
    # without the secret, nothing
    import aiohttp
    async with aiohttp.ClientSession() as session:
        async with session.post(http["url"], json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) as reply:
            assert reply.status == 401
    await running.idle()


async def test_a_run_taken_by_an_earlier_run_of_the_bridge_but_not_begun_runs_once_after_the_start(
        bridge_factory, tmp_path, owner):
    """The bridge stopped between taking a scheduled run and prompting it: the next start's
    recovery runs it (it is a turn record like any other), once; the scheduler takes it no more."""
    from store import Store

    log = tmp_path / "alice.log"
    agents = {"alice": mcp_agent(log, tmp_path)}
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    room = await channel_with_alice(owner, "taken")
    await ask(owner, room, '[[tool:schedule {"prompt": "taken before the stop", "in_seconds": 3600}]]',
              "schedule")
    await running.idle()
    channel_id = running.store.channel_by_room(room).id
    (schedule,) = running.store.schedules.listed(channel_id)
    data_dir = running.config.data_dir
    await running.stop()
    store = Store.open("sqlite", data_dir)
    try:  # what the stopped run had done: the run taken, its turn not begun
        assert store.schedules.fire(schedule.id, schedule.due, None, "an-earlier-run") is not None
    finally:
        store.close()
    running = await bridge_factory(agents, folder=folder)
    await sync_until(owner, lambda: "echo: taken before the stop" in answers(owner, room))
    await running.idle()
    await caught_up(owner, room)
    assert len(runs(owner, room, "taken before the stop")) == 1
    assert answers(owner, room).count("echo: taken before the stop") == 1
    assert running.store.schedules.listed(channel_id) == []
    assert running.bridge.scheduler.fired == 0


async def test_a_run_whose_agent_left_the_room_is_dropped_and_its_schedule_cancelled(
        bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    room = await channel_with_alice(owner, "kicked")
    await ask(owner, room, '[[tool:schedule {"prompt": "after the kick", "cron": "* * * * *"}]]', "schedule")
    await running.idle()
    store = running.store
    channel_id = store.channel_by_room(room).id
    assert isinstance(await owner.room_kick(room, ALICE), nio.RoomKickResponse)
    await wait_until(lambda: store.member(channel_id, "alice") is None, what="alice is no member")
    clock_moved_on(running, 61)  # past the next minute (no waiting for it)
    await wait_until(lambda: store.schedules.listed(channel_id) == [], timeout=60,
                     what="the schedule is cancelled at its first run")
    await running.idle()
    await caught_up(owner, room)
    assert runs(owner, room, "after the kick") == []
    members = [e for e in events_in(owner, room) if e.get("type") == "m.room.member" and e.get("state_key") == ALICE]
    assert members[-1]["content"]["membership"] == "leave"  # not invited back
