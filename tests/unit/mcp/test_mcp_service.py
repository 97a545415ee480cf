"""The bridge's side of the MCP server (bridge/mcp/service.py), without Matrix: a secret reaches
its own conversation only, an unknown one nothing; a secret lives as long as its session and the
agent's membership; calls per turn are capped; the socket is private; a call over the socket
gets its answer as a line."""

from __future__ import annotations

import asyncio
import os
import stat
from types import SimpleNamespace

import pytest

from bridge.mcp import actions, wire
from bridge.mcp.service import McpService
from bridge.mcp.stdio import forward


def fake_bridge(tmp_path, limit=3, tools=True):
    agents = {"alice": SimpleNamespace(tools=tools), "bob": SimpleNamespace(tools=True)}
    config = SimpleNamespace(agents=agents, data_dir=tmp_path / "data", tool_calls_per_turn=limit, history_messages=100)
    channels = {"c1": SimpleNamespace(id="c1", room_id="!here:hs"), "c2": SimpleNamespace(id="c2", room_id="!there:hs")}

    left: set = set()  # (channel id, agent): no longer members
    closed: set = set()  # (channel id, conversation): its sessions closed (a deleted thread)

    async def channel(channel_id):
        return channels.get(channel_id)

    async def member(channel_id, agent, conversation=""):
        if (channel_id, agent) in left:
            return None
        return SimpleNamespace(session_id=None if (channel_id, conversation) in closed else "s1")

    return SimpleNamespace(
        config=config,
        portals={},
        channels=channels,
        left=left,
        closed=closed,
        db=SimpleNamespace(channel=channel, member=member),
    )


def service_of(bridge) -> McpService:
    return McpService(bridge.config, bridge.db, SimpleNamespace(portals=bridge.portals), means=None)


def portal(room_id, channel_id):
    return SimpleNamespace(room_id=room_id, channel=SimpleNamespace(id=channel_id), runs={})


@pytest.fixture
def calls(monkeypatch):
    seen = []

    async def run(means, scope, tool, args):
        seen.append((scope, tool, args))
        return f"{tool} in {scope.room_id}"

    monkeypatch.setattr(actions, "run", run)
    return seen


async def test_a_secret_acts_on_its_own_conversation_and_an_unknown_one_on_nothing(tmp_path, calls):
    bridge = fake_bridge(tmp_path)
    service = service_of(bridge)
    await service.start()
    try:
        here, there = portal("!here:hs", "c1"), portal("!there:hs", "c2")
        (entry,) = service.servers_for(here, "alice")
        secret = {e["name"]: e["value"] for e in entry["env"]}[wire.ENV_SECRET]
        other = {e["name"]: e["value"] for e in service.servers_for(there, "alice")[0]["env"]}[wire.ENV_SECRET]
        assert other != secret
        assert await service.call(secret, "history", {}) == ("history in !here:hs", False)
        assert await service.call(other, "history", {}) == ("history in !there:hs", False)
        text, error = await service.call("guessed", "history", {})
        assert error and "not known" in text
        text, error = await service.call(secret, "history", {"limit": "all"})
        assert error and "`limit`" in text
        assert len(calls) == 2
        bridge.channels["c2"] = SimpleNamespace(id="c2", room_id="!upgraded:hs")  # the room was upgraded
        assert await service.call(other, "history", {}) == ("history in !upgraded:hs", False)
        del bridge.channels["c2"]  # deleted meanwhile
        text, error = await service.call(other, "history", {})
        assert error and "deleted" in text
        service.forget_channel("c1")
        assert (await service.call(secret, "history", {}))[1] is True
    finally:
        await service.stop()


def secret_of(entries: list[dict]) -> str:
    return {e["name"]: e["value"] for e in entries[0]["env"]}[wire.ENV_SECRET]


async def test_a_secret_lives_as_long_as_its_session_and_its_agents_membership(tmp_path, calls):
    """A new session in a conversation (`!reset`, `!resume` of another, a reload) revokes the
    secret of the one before; a call after the agent left or was kicked, or after its thread's
    sessions were closed (the thread deleted), is refused and its secret stays revoked; the other
    conversations' secrets still work."""
    bridge = fake_bridge(tmp_path)
    service = service_of(bridge)
    await service.start()
    try:
        here, there = portal("!here:hs", "c1"), portal("!there:hs", "c2")
        first = secret_of(service.servers_for(here, "alice"))
        assert (await service.call(first, "history", {}))[1] is False
        second = secret_of(service.servers_for(here, "alice"))  # the next session opened here
        assert second != first
        text, error = await service.call(first, "history", {})
        assert error and "not known" in text
        assert (await service.call(second, "history", {}))[1] is False

        # a deleted thread: its session closed, its secret refused, then unknown
        thread = secret_of(service.servers_for(here, "alice", None, "$root"))
        assert (await service.call(thread, "history", {}))[1] is False
        bridge.closed.add(("c1", "$root"))
        text, error = await service.call(thread, "history", {})
        assert error and "closed" in text
        bridge.closed.clear()  # even were a session opened there again: this secret is gone
        assert "not known" in (await service.call(thread, "history", {}))[0]

        # kicked from c1: refused there (and stays so), still at work in c2
        elsewhere = secret_of(service.servers_for(there, "alice"))
        bridge.left.add(("c1", "alice"))
        text, error = await service.call(second, "history", {})
        assert error and "no longer a member of this channel" in text
        bridge.left.clear()  # invited back: a new session gets a new secret, this one stays revoked
        assert "not known" in (await service.call(second, "history", {}))[0]
        assert await service.call(elsewhere, "history", {}) == ("history in !there:hs", False)
        assert [scope.room_id for scope, _, _ in calls] == ["!here:hs", "!here:hs", "!here:hs", "!there:hs"]
    finally:
        await service.stop()


async def test_calls_per_turn_are_capped_and_a_new_turn_starts_again(tmp_path, calls):
    bridge = fake_bridge(tmp_path, limit=2)
    service = service_of(bridge)
    await service.start()
    try:
        room = portal("!here:hs", "c1")
        bridge.portals["!here:hs"] = room
        secret = service.servers_for(room, "alice")[0]["env"][1]["value"]
        room.runs[""] = SimpleNamespace(agent_name="alice")
        assert [(await service.call(secret, "schedules", {}))[1] for _ in range(3)] == [False, False, True]
        text, _ = await service.call(secret, "schedules", {})
        assert "at most 2 tool calls per turn" in text
        room.runs[""] = SimpleNamespace(agent_name="alice")  # the next turn
        assert (await service.call(secret, "schedules", {}))[1] is False
        assert len(calls) == 3
    finally:
        await service.stop()


async def test_tools_off_offers_no_server(tmp_path, calls):
    bridge = fake_bridge(tmp_path, tools=False)
    service = service_of(bridge)
    await service.start()
    try:
        assert service.servers_for(portal("!r:hs", "c1"), "alice") == []
        assert service.servers_for(portal("!r:hs", "c1"), "bob") != []
    finally:
        await service.stop()


async def test_the_socket_is_private_and_answers_a_line(tmp_path, calls):
    bridge = fake_bridge(tmp_path)
    service = service_of(bridge)
    await service.start()
    try:
        assert stat.S_IMODE(os.stat(service.path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(service.path.parent).st_mode) == 0o700
        secret = service.servers_for(portal("!r:hs", "c1"), "alice")[0]["env"][1]["value"]
        assert await forward(str(service.path), secret, "schedules", None) == ("schedules in !here:hs", False)
        reader, writer = await asyncio.open_unix_connection(str(service.path))
        writer.write(b"garbage\n")
        text, error = wire.read_reply(await reader.readline())
        writer.close()
        assert error and text.startswith("bad request")
    finally:
        await service.stop()
    assert not service.path.exists()
    text, error = await forward(str(service.path), "x", "history", {})
    assert error and "not reachable" in text


async def test_a_data_folder_too_deep_for_a_socket_gets_a_private_one(tmp_path, calls):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    bridge = fake_bridge(deep)
    service = service_of(bridge)
    await service.start()
    try:
        assert len(str(service.path)) <= 100 and not str(service.path).startswith(str(deep))
        assert stat.S_IMODE(os.stat(service.path.parent).st_mode) == 0o700
        secret = service.servers_for(portal("!r:hs", "c1"), "alice")[0]["env"][1]["value"]
        assert (await forward(str(service.path), secret, "schedules", None))[1] is False
    finally:
        await service.stop()
    assert not service.path.parent.exists()


async def test_a_threads_session_acts_in_its_thread(tmp_path, calls):
    """Each conversation has its own secret: a session opened in a thread acts in that thread."""
    service = service_of(fake_bridge(tmp_path))
    await service.start()
    try:
        here = portal("!here:hs", "c1")
        main, thread = (
            {e["name"]: e["value"] for e in service.servers_for(here, "alice", None, conversation)[0]["env"]}[
                wire.ENV_SECRET
            ]
            for conversation in ("", "$root")
        )
        assert main != thread
        await service.call(main, "history", {})
        await service.call(thread, "history", {})
        assert [scope.conversation for scope, _, _ in calls] == ["", "$root"]
    finally:
        await service.stop()


async def test_http_is_served_only_from_the_first_session_of_an_agent_announcing_it(tmp_path, calls):
    """The HTTP port listens from the start (its URL is known), the SDK is served only once an
    agent announcing `mcpCapabilities.http` gets the entry; a request made before that waits in
    the backlog and is answered then. An agent without HTTP starts nothing."""
    service = service_of(fake_bridge(tmp_path))
    await service.start()
    try:
        url = service.http_url
        assert url and url.startswith("http://127.0.0.1:") and not service._http.serving
        here = portal("!here:hs", "c1")
        assert len(service.servers_for(here, "alice", SimpleNamespace(mcp_capabilities={}))) == 1
        assert not service._http.serving
        from urllib.parse import urlsplit

        where = urlsplit(url)
        reader, writer = await asyncio.open_connection(where.hostname, where.port)  # the backlog takes it
        body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
        writer.write(
            b"POST " + where.path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nobody\r\n"
            b"Content-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        await writer.drain()  # sent before anything serves
        stdio, http = service.servers_for(here, "alice", SimpleNamespace(mcp_capabilities={"http": True}))
        assert http["url"] == url and service._http.serving
        status = await asyncio.wait_for(reader.readline(), 60)
        assert status.split()[1] == b"401"  # served: an unknown secret is refused before MCP
        writer.close()
    finally:
        await service.stop()


def test_starting_the_mcp_service_does_not_import_the_sdk(tmp_path):
    """The SDK costs ~37 MB: a bridge whose agents never announce HTTP never loads it."""
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "from tests.unit.mcp.test_mcp_service import fake_bridge, service_of\n"
        "from pathlib import Path\n"
        "async def main():\n"
        f"    service = service_of(fake_bridge(Path({str(tmp_path)!r})))\n"
        "    await service.start()\n"
        "    assert service.http_url\n"
        "    await service.stop()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'uvicorn', 'starlette', 'pydantic')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
