"""Handoff with the real OpenCode (docs/sessions.md "Handoff"): a session made by a plain ACP
client outside the bridge — the test starts `opencode acp` itself and drives it over stdio as Zed
would, in the agent's working directory, with the same HOME and so the same session store — is
listed by `!sessions` in a Matrix thread, marked "elsewhere"; `!resume N` carries it on in that
thread, and the next prompt reaches the model with the earlier exchange in it: OpenCode remembers
what was said elsewhere.

OpenCode announces `sessionCapabilities` list and resume, so the bridge lists with `session/list`
(cwd) and resumes with `session/resume`. The model is the shipped SmolLM2 behind
`tests/agents/llm_server.py`, whose request log says what OpenCode sent it; what the small model
answers is not asserted.

The model's answers are awaited as long as the model server works on them (`while_the_model_works`):
OpenCode's first prompt is ~2,200 tokens of system prompt, evaluated from scratch, and on a loaded
2-core machine that ran at 22, 7, 5 and under 2.5 tokens/s (15+ minutes): a fixed limit gave up
while the model was still evaluating. The test fails when the server has done no work for
MODEL_QUIET seconds while an answer is awaited: then nothing is coming.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest
from bridge_harness import answers_in
from helpers import in_thread, is_final, open_dm, say, thread_of
from matrix_helpers import events_in, sync_until
from test_opencode import PUPPET, LlmServer, llm_server, opencode_binary, opencode_entry  # noqa: F401

pytestmark = [pytest.mark.model, pytest.mark.thirdparty]

ELSEWHERE = "My project is called ZEBRA-1234."
MODEL_QUIET = 180.0  # s without any work of the model server while an answer is awaited: stuck
WORK = 0.5  # CPU seconds the server must have used since the last check to count as working


async def while_the_model_works(model: LlmServer, waiting: asyncio.Future, what: str):
    """`waiting`'s result, however long the model takes, as long as its server keeps working (its
    CPU time grows); AssertionError once it has done nothing for MODEL_QUIET s."""
    start = worked = time.monotonic()
    used = model.cpu_seconds()
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=5)
            if done:
                return waiting.result()
            now, cpu = time.monotonic(), model.cpu_seconds()
            if cpu - used >= WORK:
                used, worked = cpu, now
            elif now - worked > MODEL_QUIET:
                raise AssertionError(
                    f"{what}: still nothing after {now - start:.0f} s, and the model server has done "
                    f"no work for {now - worked:.0f} s"
                )
    finally:
        if not waiting.done():
            waiting.cancel()


async def made_elsewhere(model: LlmServer, entry: dict, cwd: Path, text: str) -> str:
    """As Zed would: start OpenCode's ACP side with the config's command, env and cwd, open a
    session in `cwd`, prompt it once, wait for the answer, stop it; the session's id."""
    process = await asyncio.create_subprocess_exec(
        *entry["command"],
        cwd=str(cwd),
        env={**os.environ, **entry["env"]},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        limit=16 * 1024 * 1024,
    )

    async def call(ident: int, method: str, params: dict) -> dict:
        process.stdin.write(
            (json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}) + "\n").encode()
        )
        await process.stdin.drain()
        while True:
            reading = asyncio.ensure_future(process.stdout.readline())
            if method == "session/prompt":  # the model works on it
                line = await while_the_model_works(model, reading, f"OpenCode's answer to {method}")
            else:
                line = await asyncio.wait_for(reading, 120)
            assert line, f"opencode acp closed its stdout during {method}"
            message = json.loads(line)
            if "method" in message and "id" in message:  # a request of the agent's: not offered
                reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "not offered"}}
                process.stdin.write((json.dumps(reply) + "\n").encode())
                await process.stdin.drain()
            elif message.get("id") == ident and "method" not in message:
                assert "result" in message, message
                return message["result"]

    try:
        await call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session_id = (await call(2, "session/new", {"cwd": str(cwd), "mcpServers": []}))["sessionId"]
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        done = await call(3, "session/prompt", prompt)
        assert done.get("stopReason") == "end_turn", done
        return session_id
    finally:
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            process.terminate()
            await process.wait()


def notices(owner, room_id) -> list[dict]:
    return [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and e.get("sender") == PUPPET and e["content"].get("msgtype") == "m.notice"
    ]


async def command(owner, room_id: str, text: str, thread: str) -> str:
    """Send a command into `thread`; the puppet's next notice there."""
    before = {e["event_id"] for e in notices(owner, room_id)}
    await say(owner, room_id, text, **in_thread(thread, thread))

    def new() -> list[dict]:
        return [e for e in notices(owner, room_id) if e["event_id"] not in before and thread_of(e) == thread]

    await sync_until(owner, new, timeout=120)
    return new()[0]["content"]["body"]


async def test_a_session_made_in_another_acp_client_is_resumed_in_a_thread_and_remembered(
    bridge_factory, request, tmp_path, owner
):
    model = request.getfixturevalue("llm_server")  # test_opencode's fixtures
    entry = opencode_entry(request.getfixturevalue("opencode_binary"), model, tmp_path / "home")
    work = Path(entry["cwd"]).resolve()

    # 1. elsewhere: a plain ACP client makes a session in OpenCode's working directory
    made = await made_elsewhere(model, entry, work, ELSEWHERE)
    told = [r for r in model.requests() if ELSEWHERE in (r.get("last_user") or "")]
    assert told, model.requests()  # the exchange elsewhere reached the model

    # 2. in Matrix: the bridge runs OpenCode with the same config (same HOME, same store)
    await bridge_factory({"opencode": entry})
    room_id = await open_dm(owner, PUPPET)
    root = await say(owner, room_id, "!status")  # a thread's root that asks the model nothing
    await sync_until(owner, lambda: notices(owner, room_id), timeout=120)
    listing = await command(owner, room_id, "!sessions", thread=root)
    [line] = [line for line in listing.splitlines() if "elsewhere" in line]
    number = int(re.match(r"\s*(\d+)\. ", line).group(1))
    resumed = await command(owner, room_id, f"!resume {number}", thread=root)
    assert resumed.startswith(f"OpenCode (SmolLM2, local) goes on in session {number}"), resumed
    status = await command(owner, room_id, "!status ids", thread=root)
    assert f"session {made}" in status, status  # the thread now works in that very session

    # 3. the next prompt in the thread reaches the model with the earlier exchange
    before = len(model.requests())
    marker = "What is my project called? (okapi-5521)"
    await say(owner, room_id, marker, **in_thread(root, root))

    def answered() -> list[dict]:
        in_root = {e["event_id"] for e in events_in(owner, room_id) if e.get("content") and thread_of(e) == root}
        return [
            a
            for a in answers_in(events_in(owner, room_id), PUPPET)
            if a["msgtype"] != "m.notice" and a["event_id"] in in_root and is_final(a)
        ]

    seen = asyncio.ensure_future(sync_until(owner, answered, timeout=24 * 3600))  # as long as the model works
    await while_the_model_works(model, seen, "the answer in the thread")
    requests = [r for r in model.requests()[before:] if marker in (r.get("last_user") or "")]
    assert len(requests) == 1, model.requests()[before:]
    [request] = requests
    assert any(ELSEWHERE in said for said in request["users"][:-1]), request["users"]
    assert "assistant" in request["roles"], request["roles"]  # its answer there too
