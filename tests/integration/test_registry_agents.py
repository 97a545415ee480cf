"""`!agents add ID` and `!agents remove NAME` in the bot's DM (docs/commands.md "In the bridge bot's DM"):
real Synapse, the real bridge in-process, a registry served by a local HTTP server whose entry is a
`binary` archive holding a tiny ACP agent (tests/agents/tiny_agent.py). The agent is written into
the config, unpacked, started, and answers in a new DM without a restart; removed, it says so in
its rooms and leaves them.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
from pathlib import Path

import nio
import pytest
from aiohttp import web
from bridge_harness import agent, wait_until
from helpers import say
from matrix_helpers import events_in, notices, open_dm, sync_until

import config

ROOT = Path(__file__).resolve().parents[2]
BOT, TINY = "@sidekicks:localhost", "@sk_tiny-bin:localhost"


def archive() -> bytes:
    data = (ROOT / "tests" / "agents" / "tiny_agent.py").read_bytes()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo("bin/tiny")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
async def registry_url():
    app = web.Application()
    base: list[str] = []
    platform_key = "linux-x86_64" if os.uname().machine == "x86_64" else "linux-aarch64"

    async def registry_json(_request):
        target = {"archive": f"{base[0]}/tiny.tar.gz", "cmd": "./bin/tiny", "args": ["acp"]}
        entry = {"id": "tiny-bin", "name": "Tiny", "version": "1.2.3", "description": "a tiny agent"}
        return web.json_response(
            {"version": "1.0.0", "agents": [{**entry, "distribution": {"binary": {platform_key: target}}}]}
        )

    async def tiny(_request):
        return web.Response(body=archive())

    app.router.add_get("/registry.json", registry_json)
    app.router.add_get("/tiny.tar.gz", tiny)
    async with served(app, base) as url:
        yield f"{url}/registry.json"


@contextlib.asynccontextmanager
async def served(app: web.Application, base: list[str]):
    """`app` served on 127.0.0.1 (a free port): its address, also appended to `base` for the
    handlers that write it into what they answer."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
    try:
        yield base[0]
    finally:
        await runner.cleanup()


async def bot_line(owner, room_id: str, starting: str, timeout: float = 120) -> str:
    def found() -> list[str]:
        return [n for n in notices(owner, room_id, BOT) if n.startswith(starting)]

    await sync_until(owner, lambda: found(), timeout=timeout)
    return found()[0]


async def test_an_agent_added_in_the_bots_dm_answers_without_a_restart_and_leaves_when_removed(
    bridge_factory, tmp_path, owner, registry_url, monkeypatch
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    running = await bridge_factory({"alice": agent()}, registry=registry_url)
    path = running.bridge.config.path
    response = await owner.room_create(is_direct=True, invite=[BOT], preset=nio.RoomPreset.trusted_private_chat)
    assert isinstance(response, nio.RoomCreateResponse), response
    dm = response.room_id
    await sync_until(owner, lambda: notices(owner, dm, BOT))

    await say(owner, dm, f"!agents add tiny-bin --cwd {work}")
    done = await bot_line(owner, dm, f"registry: {registry_url}")
    assert "added tiny-bin: Tiny 1.2.3 (binary)" in done, done
    assert "✓ tiny-bin: tiny 9.9" in done, done
    assert list(config.load(path).agents) == ["alice", "tiny-bin"]

    room_id = await open_dm(owner, TINY)
    await say(owner, room_id, "hello there")

    def answers() -> list[str]:
        return [
            e["content"].get("body", "")
            for e in events_in(owner, room_id)
            if e.get("sender") == TINY and e.get("type") == "m.room.message"
        ]

    await sync_until(owner, lambda: any("tiny: hello there acp" in a for a in answers()), timeout=120)

    await say(owner, dm, "!agents remove tiny-bin")
    assert await bot_line(owner, dm, "Removed tiny-bin") == f"Removed tiny-bin from {path}; it left 1 room(s)."
    await sync_until(owner, lambda: "tiny-bin was removed from the config: leaving." in answers())

    def left() -> bool:
        members = [
            e for e in events_in(owner, room_id) if e.get("type") == "m.room.member" and e.get("state_key") == TINY
        ]
        return bool(members) and members[-1]["content"].get("membership") == "leave"

    await sync_until(owner, left)
    assert list(config.load(path).agents) == ["alice"]
    await wait_until(lambda: "tiny-bin" not in running.bridge.config.agents)
