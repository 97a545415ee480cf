"""An ACP client attached through `sidekicks acp` vs the same agent driven directly by that client
(docs/sessions.md "Attach an editor"): a prompt written by the client → the first
`agent_message_chunk` it reads.

The scripted echo agent (tests/agents/scripted_agent.py): once behind the running bridge (the
client attached to the agent's DM, the prompt routed, stored and queued as a room message, quoted
in the room, the agent's update forwarded back), once started by the client itself — the two sides
taking turns, so both see the same machine load. The first round of each side is left out (the
agent's start, cold caches). Goal: ≤ 1.10× the direct side.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from acp_client import AcpClient  # noqa: E402
from bridge_harness import SCRIPTED, agent, start_bridge, wait_until  # noqa: E402
from common import median, p99  # noqa: E402

import config as configuration  # noqa: E402
from bridge.attach import wire  # noqa: E402

ECHO = "@sk_echo:localhost"
GOAL = 1.10


async def first_text(client: AcpClient, session: str, text: str) -> float:
    """Seconds from the prompt written to the first agent text the client reads (and the prompt over)."""
    seen = len(client.received)
    began = time.perf_counter()
    await client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    for message, when in zip(client.received[seen:], client.arrived[seen:], strict=True):
        update = (message.get("params") or {}).get("update") or {}
        if message.get("method") == "session/update" and update.get("sessionUpdate") == "agent_message_chunk":
            return when - began
    raise AssertionError("no agent text came")


async def run(bench, owner, folder: Path) -> dict:
    rounds = 10 if bench.quick else 40
    xdg, config_folder = folder / "xdg", folder / "bridge-attach"
    data = xdg / "sidekicks" / "data" / configuration.config_hash(config_folder / "config.yaml")
    running = await start_bridge(bench, config_folder, {"echo": agent("--echo-last-line", title="Echo")}, data_dir=data)
    attached = direct = None
    try:
        room = await owner.create_room(invite=[ECHO], direct=True)
        await owner.wait_joined(room, ECHO)
        await wait_until(lambda: running.store.channel_by_room(room) is not None, what="the DM is a channel")
        channel = running.store.channel_by_room(room)
        session = wire.session_id(channel.id, "")
        attached = await AcpClient.start(running.config.path, xdg, agent="echo")
        await attached.initialize()
        await attached.call("session/resume", {"sessionId": session, "cwd": "/", "mcpServers": []})
        direct = await AcpClient.spawn([sys.executable, str(SCRIPTED), "--echo-last-line"], {})
        await direct.initialize()
        own = (await direct.call("session/new", {"cwd": str(folder), "mcpServers": []}))["sessionId"]
        sides = {"attached": (attached, session), "direct": (direct, own)}
        times: dict[str, list[float]] = {"attached": [], "direct": []}
        for i in range(rounds + 1):
            order = ("attached", "direct") if i % 2 == 0 else ("direct", "attached")
            for side in order:
                client, where = sides[side]
                took = await first_text(client, where, f"round {i}")
                if i:  # the first round of each side is left out
                    times[side].append(took)
        return {"rounds": rounds, "times": times}
    finally:
        for client in (attached, direct):
            if client is not None:
                await client.close()
        await running.stop()


def rows(r: dict) -> list[tuple]:
    attached, direct = median(r["times"]["attached"]), median(r["times"]["direct"])
    return [
        (
            "Attach",
            f"ACP client prompt → first agent text, p50 / p99 ({r['rounds']} each, alternating)",
            f"{attached * 1e3:.1f} / {p99(r['times']['attached']) * 1e3:.1f} ms",
            f"{direct * 1e3:.1f} / {p99(r['times']['direct']) * 1e3:.1f} ms",
            f"{attached / direct:.2f}×",
            f"≤ {GOAL:.2f}×",
            attached / direct <= GOAL,
        )
    ]


def notes(r: dict) -> list[str]:
    return [
        "attach: the bridge side posts the prompt's quote to Synapse and stores it before the agent "
        'is asked; the direct side is the agent alone (docs/sessions.md "Attach an editor")'
    ]
