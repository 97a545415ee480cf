"""Prepare ahead through the bridge (docs/prepare.md): a running member that announces
`_sidekicks/prepare` is handed the start of the prompt it will get, and the prompt it then gets
is byte for byte the one it gets without preparation (the example of docs/architecture.md "What each
agent reads"); an agent that is not running is never started to prepare.

Real Synapse, the owner's matrix-nio client, the real bridge in-process, scripted agents that log
every JSON-RPC message they receive (`--log`).
"""

from __future__ import annotations

from bridge_harness import agent, answers_in, wait_until
from helpers import group, is_final, prompts, received, say
from matrix_helpers import events_in, sync_until

ALICE, BOB, CAROL = "@sk_alice:localhost", "@sk_bob:localhost", "@sk_carol:localhost"
GOROUTINES = "Goroutines are light threads…"
KNOWN = (
    "[Messages in #general you have not seen yet]\n"
    "user: @alice explain goroutines\n"
    "alice: Goroutines are light threads…\n"
    "[End of the messages]\n"
    "The user now writes to you (answer directly, without your name in front):\n"
)
QUESTION = "@bob what do you think?"


async def wait_answers(owner, room_id, puppet_id, count=1) -> None:
    def done():
        found = [a for a in answers_in(events_in(owner, room_id), puppet_id) if a["msgtype"] != "m.notice"]
        return len(found) >= count and all(is_final(a) for a in found[:count])

    await sync_until(owner, done, timeout=60)


def prepares(log) -> list[dict]:
    return [m["params"] for m in received(log) if m.get("method") == "_sidekicks/prepare"]


def prompt_sessions(log) -> list[str]:
    return [m["params"]["sessionId"] for m in received(log) if m.get("method") == "session/prompt"]


async def test_a_running_member_is_handed_its_prompts_start_and_the_prompt_is_unchanged(
    bridge_factory, tmp_path, owner
):
    logs = {name: tmp_path / f"{name}.log" for name in ("alice", "bob", "carol")}
    await bridge_factory(
        {
            "alice": agent("--answer", GOROUTINES, "--log", str(logs["alice"]), title="Alice"),
            "bob": agent("--prepare", "--log", str(logs["bob"]), title="Bob"),
            "carol": agent("--prepare", "--log", str(logs["carol"]), title="Carol"),
        }
    )
    room_id = await group(owner, ALICE, BOB, CAROL)
    await say(owner, room_id, "@bob hello")  # bob runs from now on, and has seen everything
    await wait_answers(owner, room_id, BOB)
    await say(owner, room_id, "@alice explain goroutines")
    await wait_answers(owner, room_id, ALICE)

    # bob, running and idle, is handed what it has not seen, as its next prompt will begin
    await wait_until(
        lambda: any(p["prompt"] == [{"type": "text", "text": KNOWN}] for p in prepares(logs["bob"])), timeout=30
    )
    prepared_in = prepares(logs["bob"])[-1]["sessionId"]

    await say(owner, room_id, QUESTION)
    await wait_answers(owner, room_id, BOB, count=2)
    # byte for byte the example's text, as without preparation (tests/integration/test_channels.py)
    assert prompts(logs["bob"])[-1] == KNOWN + QUESTION
    assert prompt_sessions(logs["bob"])[-1] == prepared_in  # prepared in the session it is asked in
    # carol was never asked: no agent is started only to prepare
    assert not logs["carol"].exists() or received(logs["carol"]) == []
