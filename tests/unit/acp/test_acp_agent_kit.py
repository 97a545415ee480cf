"""The agent toolkit driven over raw pipes (no acp client in between)."""

import asyncio
import json
import sys
from pathlib import Path

SCRIPTED = str(Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py")


async def _exchange(args, messages, expect_ids):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        SCRIPTED,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    for message in messages:
        proc.stdin.write((json.dumps(message) if isinstance(message, dict) else message).encode() + b"\n")
    await proc.stdin.drain()
    seen, received = set(), []
    while not expect_ids <= seen:
        line = await asyncio.wait_for(proc.stdout.readline(), 10)
        assert line, "agent closed stdout"
        msg = json.loads(line)
        received.append(msg)
        if "id" in msg and "method" not in msg:
            seen.add(msg["id"])
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 10) == 0
    return received


async def test_kit_answers_requests_and_survives_garbage():
    received = await _exchange(
        [],
        [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
            "garbage{",
            {"jsonrpc": "2.0", "id": 2, "method": "no/such", "params": {}},
            {"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
        ],
        {1, 2, 3},
    )
    by_id = {m.get("id"): m for m in received}
    assert by_id[1]["result"]["agentInfo"] == {"name": "scripted", "version": "1.0"}
    assert by_id[None]["error"]["code"] == -32700
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[3]["result"]["sessionId"].startswith("sess_")
