"""Handoff (docs/sessions.md): a session made by another ACP client — the test drives the
scripted agent over stdio as Zed would, in the agent's working directory — is listed by
`!sessions` in a Matrix room, marked "elsewhere" with the title the agent gave it; `!resume 1`
carries it on here (session/resume), and the next prompt goes to that very session, its earlier
exchange included; `!status ids` names the session id another ACP client resumes it by; `!sessions
delete N` deletes one (session/delete), never the current one."""

from __future__ import annotations

import asyncio
import json
import re
import sys

from bridge_harness import SCRIPTED, agent
from helpers import ALICE, open_dm, received
from test_sessions import SESSIONS, answer, command, session_of


async def made_elsewhere(state, cwd, text: str) -> str:
    """A session made and prompted by a plain ACP client outside the bridge; its id."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPTED),
        "--load-session",
        *SESSIONS,
        "--state",
        str(state),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )

    async def call(ident: int, method: str, params: dict) -> dict:
        process.stdin.write(
            (json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}) + "\n").encode()
        )
        await process.stdin.drain()
        while True:
            message = json.loads(await asyncio.wait_for(process.stdout.readline(), 60))
            if message.get("id") == ident and "method" not in message:
                assert "result" in message, message
                return message["result"]

    try:
        await call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session_id = (await call(2, "session/new", {"cwd": str(cwd), "mcpServers": []}))["sessionId"]
        await call(3, "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})
        return session_id
    finally:
        process.stdin.close()
        await process.wait()


async def test_a_session_made_by_another_client_is_listed_elsewhere_and_carried_on_here(
    bridge_factory, tmp_path, owner
):
    state, work, log = tmp_path / "state", tmp_path / "work", tmp_path / "alice.log"
    work.mkdir()
    zed = await made_elsewhere(state, work.resolve(), "[[title:Kumquat plans]] remember kumquat")
    await bridge_factory(
        {
            "alice": agent(
                "--load-session",
                *SESSIONS,
                "--session-delete",
                "--state",
                str(state),
                "--log",
                str(log),
                title="Alice",
                cwd=str(work),
            )
        }
    )
    room_id = await open_dm(owner)
    listing = await command(owner, room_id, "!sessions")
    assert re.search(r"1\. Kumquat plans — .* — elsewhere \(another client's", listing), listing
    assert await command(owner, room_id, "!resume 1") == "Alice goes on in session 1 (Kumquat plans)."
    assert [m["params"]["sessionId"] for m in received(log) if m.get("method") == "session/resume"] == [zed]
    # the same session, with what was said in it elsewhere: this is its second prompt
    assert session_of(await answer(owner, room_id, ALICE, "[[session]]")) == (zed, 2)
    status = await command(owner, room_id, "!status ids", starts="Status of")
    assert f"session {zed}" in status, status
    listing = await command(owner, room_id, "!sessions")
    assert "1. Kumquat plans — just now ← current" in listing, listing

    # !sessions delete N: never the current one; another one is gone from the agent's list
    assert (await command(owner, room_id, "!sessions delete 1")).startswith("Session 1 is Alice's current one here")
    assert (await command(owner, room_id, "!reset")).startswith("Alice starts a new session here")
    listing = await command(owner, room_id, "!sessions")
    assert "2. Kumquat plans" in listing, listing
    assert await command(owner, room_id, "!sessions delete 2") == "Deleted Alice's session 2 (Kumquat plans)."
    assert [m["params"]["sessionId"] for m in received(log) if m.get("method") == "session/delete"] == [zed]
    assert "Kumquat" not in await command(owner, room_id, "!sessions")
