"""The local agent loads its model in the background from its start (docs/performance.md "The
local agent's first token"): a crash during that load reaches the owner as any crash of an agent
does, a notice with its exit code and the end of its error output, and the answer says it was
interrupted.

Real Synapse, the owner's matrix-nio client, the real bridge in-process, the shipped local agent
with its model's load made to crash (tests/agents/local_load_agent.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bridge_harness import answers_in
from helpers import group, is_final, say
from matrix_helpers import events_in, sync_until

LOCAL = "@sk_local:localhost"
LOAD_AGENT = Path(__file__).resolve().parents[1] / "agents" / "local_load_agent.py"


async def test_a_crash_while_the_model_loads_is_a_notice_with_its_exit_code_and_stderr(bridge_factory, owner, tmp_path):
    command = [sys.executable, str(LOAD_AGENT), "crash", "7", "--sessions", str(tmp_path / "sessions")]
    await bridge_factory({"local": {"command": command, "title": "Local"}})
    room_id = await group(owner, LOCAL)
    await say(owner, room_id, "what grows in shade?")

    def messages() -> list[dict]:
        return answers_in(events_in(owner, room_id), LOCAL)

    def notices() -> list[str]:
        return [m["body"] for m in messages() if m["msgtype"] == "m.notice"]

    def answers() -> list[dict]:
        return [m for m in messages() if m["msgtype"] != "m.notice"]

    await sync_until(owner, lambda: notices() and answers() and is_final(answers()[0]), timeout=120)
    [notice] = notices()
    assert "stopped unexpectedly (exit code 7)" in notice, notice
    assert "the model's load crashed here (on purpose)" in notice, notice
    [answer] = answers()
    assert "interrupted" in answer["body"] and "exit code 7" in answer["body"], answer["body"]
