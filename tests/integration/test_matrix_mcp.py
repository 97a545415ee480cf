"""The bridge's MCP server `matrix` (docs/architecture.md "MCP tools and schedules"), end
to end: a real Synapse, the real bridge, the owner's matrix-nio client, and a scripted agent
(tests/agents/mcp_agent.py) that starts the stdio server from the `mcpServers` entry it got in
session/new with the official MCP client and calls a tool on a directive in the prompt, answering
with the tool's result. Schedules, the same way: test_mcp_schedules.py.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import nio
from bridge_harness import answers_in
from helpers import received, say
from matrix_helpers import caught_up, events_in, sync_until, wait_joined

MCP_AGENT = Path(__file__).resolve().parents[1] / "agents" / "mcp_agent.py"
SCRIPTED_AGENT = Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py"
ALICE = "@sk_alice:localhost"


def mcp_agent(log: Path, workdir: Path | None = None, *options: str, **extra) -> dict:
    entry = {"command": [sys.executable, str(MCP_AGENT), "--log", str(log), *options], "title": "Alice"}
    if workdir is not None:
        entry["cwd"] = str(workdir)
    entry.update(extra)
    return entry


def answers_of(owner, room_id: str, user_id: str) -> list[str]:
    """`user_id`'s final messages in the room, oldest first (status lines still streaming left out)."""
    return [
        m["body"]
        for m in answers_in(events_in(owner, room_id), user_id)
        if m.get("msgtype") in ("m.text", None) and not m["body"].startswith(("⏳", "💭", "✍️", "🔧"))
    ]


def answers(owner, room_id: str) -> list[str]:
    """alice's final messages in the room, oldest first."""
    return answers_of(owner, room_id, ALICE)


async def ask(owner, room_id: str, body: str, starts: str) -> str:
    """Send `body`, wait for alice's answer starting with `starts`, return it."""
    before = len(answers(owner, room_id))
    await say(owner, room_id, body)
    await sync_until(owner, lambda: any(a.startswith(starts) for a in answers(owner, room_id)[before:]))
    return next(a for a in answers(owner, room_id)[before:] if a.startswith(starts))


async def channel_with_alice(owner, name: str) -> str:
    response = await owner.room_create(name=name, invite=[ALICE])
    assert isinstance(response, nio.RoomCreateResponse), response
    await wait_joined(owner, response.room_id, ALICE)
    return response.room_id


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
    assert entry["name"] == "matrix" and entry["args"] == ["-I", "-m", "bridge", "mcp"]
    env = {e["name"]: e["value"] for e in entry["env"]}
    socket_path = Path(env["SIDEKICKS_MCP_SOCKET"])
    assert len(env["SIDEKICKS_MCP_SECRET"]) == 64
    assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(socket_path.parent).st_mode) == 0o700
    # the other room's session has another secret
    secrets = {
        next(e["value"] for e in m["params"]["mcpServers"][0]["env"] if e["name"] == "SIDEKICKS_MCP_SECRET")
        for m in news
    }
    assert len(secrets) == 2
    await running.idle()


async def test_send_file_posts_a_file_of_the_working_directory_and_refuses_one_outside(bridge_factory, tmp_path, owner):
    log, work, outside = tmp_path / "alice.log", tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "notes.txt").write_text("the notes\n")
    (outside / "secret.txt").write_text("not for the room\n")
    running = await bridge_factory({"alice": mcp_agent(log, work)})
    room = await channel_with_alice(owner, "files")
    posted = await ask(owner, room, '[[tool:send_file {"path": "notes.txt", "caption": "here they are"}]]', "send_file")
    assert posted.startswith("send_file: Posted notes.txt"), posted
    files = [e for e in events_in(owner, room) if e.get("sender") == ALICE and e["content"].get("msgtype") == "m.file"]
    assert [f["content"]["body"] for f in files] == ["notes.txt"]
    assert files[0]["content"]["info"]["size"] == len("the notes\n")
    refused = await ask(owner, room, '[[tool:send_file {"path": "%s"}]]' % (outside / "secret.txt"), "send_file")
    assert refused.startswith("send_file error: ") and "outside the agent's working directory" in refused
    up = await ask(owner, room, '[[tool:send_file {"path": "../outside/secret.txt"}]]', "send_file")
    assert "outside the agent's working directory" in up
    await running.idle()
    await caught_up(owner, room)
    files = [e for e in events_in(owner, room) if e.get("sender") == ALICE and e["content"].get("msgtype") == "m.file"]
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
    await sync_until(
        owner,
        lambda: any(
            e.get("type") == "m.reaction"
            and e.get("sender") == ALICE
            and e["content"]["m.relates_to"]["event_id"] == mine
            for e in events_in(owner, room)
        ),
    )
    refused = await ask(owner, room, '[[tool:react {"event_id": "' + theirs + '", "key": "👍"}]]', "react")
    assert refused.startswith("react error:") and "no message" in refused
    await running.idle()
    await caught_up(owner, other)
    assert not [e for e in events_in(owner, other) if e.get("type") == "m.reaction"]


async def test_tools_off_gives_the_session_no_mcp_servers(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path, tools="off")})
    room = await channel_with_alice(owner, "no tools")
    assert await ask(owner, room, "[[tools]]", "tools") == "tools: none"
    (new,) = [m for m in received(log) if m.get("method") == "session/new"]
    assert new["params"]["mcpServers"] == []
    assert not running.bridge.mcp.running
    await running.idle()


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
