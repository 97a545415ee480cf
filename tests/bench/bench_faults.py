"""How fast faults are handled: the speed parts the suite no longer asserts.

The tests prove the behaviour (a crash is told, 🛑 cancels, a huge line is read, the local model
cancels and starts without loading its model); how soon is measured here, each figure beside a
baseline from the same run:

- crash mid-answer → the crash notice seen by the owner, and 🛑 on a streaming answer → its
  "⏹ stopped" seen, both beside an echo answer's round trip through the same bridge;
- ACP framing: a 32 MiB line fed in 4 KiB pieces, beside the least any line buffer does;
- the local-model agent: process start → `initialize` answered, beside the scripted agent (the
  same kit without a model); session/cancel → the "cancelled" reply, beside its time per token.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import aiohttp
from bridge_harness import SCRIPTED, agent, start_bridge
from common import ROOT, Bench, Owner, body_of, is_final, now, p50, q

ECHO, CRASH, HOLD = "@sk_echo:localhost", "@sk_crash:localhost", "@sk_hold:localhost"


async def _dm(owner: Owner, puppet: str) -> str:
    room = await owner.create_room(invite=[puppet], direct=True)
    await owner.wait_joined(room, puppet)
    return room


def _seen(owner: Owner, room: str, start: int, test):
    def find():
        for seen, event in owner.events.get(room, [])[start:]:
            if event.get("type") == "m.room.message" and test(event):
                return seen, event
        return None

    return find


async def bridge_figures(bench: Bench, owner: Owner, rounds: int) -> dict:
    folder = bench.folder / "bridge-faults"
    running = await start_bridge(
        bench,
        folder,
        {
            "echo": agent(title="Echo"),
            "crash": agent("--crash-mid-answer", "--chunks", "2", title="Crash"),
            "hold": agent("--chunks", "2", "--hold", str(folder / "never"), title="Hold"),
        },
    )
    out = {"echo": [], "crash": [], "stop": []}
    try:
        rooms = {name: await _dm(owner, puppet) for name, puppet in (("echo", ECHO), ("crash", CRASH), ("hold", HOLD))}
        for i in range(rounds + 2):  # the first two warm up (agent start, caches)
            # echo: the baseline, one answer through the bridge
            room, start = rooms["echo"], len(owner.events.get(rooms["echo"], []))
            t0 = now()
            await owner.send_text(room, f"echo {i}")
            seen, _ = await owner.wait_for(
                _seen(
                    owner,
                    room,
                    start,
                    lambda e, i=i: e.get("sender") == ECHO and f"echo {i}" in body_of(e) and is_final(body_of(e)),
                )
            )
            if i >= 2:
                out["echo"].append(seen - t0)
            # crash: from the first part seen to the notice seen
            room, start = rooms["crash"], len(owner.events.get(rooms["crash"], []))
            await owner.send_text(room, f"crash {i}")
            first, _ = await owner.wait_for(
                _seen(owner, room, start, lambda e: e.get("sender") == CRASH and "echo" in body_of(e))
            )
            notice, _ = await owner.wait_for(
                _seen(
                    owner,
                    room,
                    start,
                    lambda e: e.get("sender") == CRASH and (e.get("content") or {}).get("msgtype") == "m.notice",
                )
            )
            if i >= 2:
                out["crash"].append(notice - first)
            # 🛑: from the reaction sent to the "⏹ stopped" seen
            room, start = rooms["hold"], len(owner.events.get(rooms["hold"], []))
            await owner.send_text(room, f"hold {i}")
            _, answer = await owner.wait_for(
                _seen(owner, room, start, lambda e: e.get("sender") == HOLD and "echo" in body_of(e))
            )
            target = ((answer.get("content") or {}).get("m.relates_to") or {}).get("event_id") or answer["event_id"]
            t0 = now()
            await owner.request(
                "PUT",
                f"/_matrix/client/v3/rooms/{q(room)}/send/m.reaction/stop{i}-{time.time_ns()}",
                {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": "🛑"}},
            )
            seen, _ = await owner.wait_for(
                _seen(owner, room, start, lambda e: e.get("sender") == HOLD and body_of(e).endswith("⏹ stopped"))
            )
            if i >= 2:
                out["stop"].append(seen - t0)
    finally:
        await running.stop()
    return out


def framing_figures(repeats: int, mib: int = 32) -> dict:
    """A `mib` MiB line fed in 4 KiB pieces to LineBuffer, beside its floor: the least any line
    buffer does (look for a newline in each piece, keep it, join once at the end). Linear
    reading costs about the floor; rescanning what is held would cost ~mib×256 times more."""
    from acp import framing

    data = framing.encode({"text": "x" * (mib * 1024 * 1024)})
    pieces = [data[pos : pos + 4096] for pos in range(0, len(data), 4096)]

    def buffer_once() -> float:
        buffer, lines = framing.LineBuffer(), []
        t0 = time.perf_counter()
        for piece in pieces:
            lines += buffer.feed(piece)
        elapsed = time.perf_counter() - t0
        assert len(lines) == 1
        return elapsed

    def floor_once() -> float:
        held: list[bytes] = []
        t0 = time.perf_counter()
        for piece in pieces:
            piece.find(b"\n")
            held.append(piece)
        line = b"".join(held)
        elapsed = time.perf_counter() - t0
        assert len(line) == len(data)
        return elapsed

    return {
        "mib": mib,
        "buffer": min(buffer_once() for _ in range(repeats)),
        "floor": min(floor_once() for _ in range(repeats)),
    }


class _Stdio:
    """An ACP agent process driven line by line (the bench's own, like tests/unit/acp/agents')."""

    def __init__(self, *command: str) -> None:
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            list(command), cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.ids = 0

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> int:
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        return self.ids

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the agent closed its stdout")
        return json.loads(line)

    def reply(self, request_id: int, on_update=None) -> dict:
        while True:
            message = self.read()
            if message.get("id") == request_id and "method" not in message:
                return message
            if on_update is not None and message.get("method") == "session/update":
                on_update(message["params"])

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


INIT = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}


def model_figures(rounds: int, folder) -> dict:
    out = {"init": [], "scripted_init": [], "cancel": [], "token": []}
    for _ in range(rounds):
        for key, command in (
            ("scripted_init", [sys.executable, SCRIPTED]),
            (
                "init",
                [
                    sys.executable,
                    "-m",
                    "acp.agents.local_model",
                    "--sessions",
                    str(folder / "sessions"),
                    "--temperature",
                    "0",
                    "--max-tokens",
                    "1000",
                ],
            ),
        ):
            agent = _Stdio(*command)
            agent.reply(agent.request("initialize", INIT))
            out[key].append(time.perf_counter() - agent.t0)
            if key == "init":
                session = agent.reply(agent.request("session/new", {"cwd": "/", "mcpServers": []}))
                session_id = session["result"]["sessionId"]
                prompt = agent.request(
                    "session/prompt",
                    {
                        "sessionId": session_id,
                        "prompt": [{"type": "text", "text": "Write a very long story about a dragon and a knight."}],
                    },
                )
                stamps = []
                while len(stamps) < 8:  # the answer streams: its pace is the baseline
                    message = agent.read()
                    update = (message.get("params") or {}).get("update") or {}
                    if update.get("sessionUpdate") == "agent_message_chunk":
                        stamps.append(time.perf_counter())
                    assert message.get("id") != prompt, "the turn ended before the cancel"
                out["token"].append((stamps[-1] - stamps[2]) / (len(stamps) - 3))
                t0 = time.perf_counter()
                agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}})
                reply = agent.reply(prompt)
                assert reply["result"] == {"stopReason": "cancelled"}, reply
                out["cancel"].append(time.perf_counter() - t0)
            agent.close()
    return out


async def run(bench: Bench, session: aiohttp.ClientSession, owner: Owner) -> dict:
    rounds = 5 if bench.quick else 20
    result = {"bridge": await bridge_figures(bench, owner, rounds)}
    result["framing"] = await asyncio.to_thread(framing_figures, 3 if bench.quick else 7)
    result["model"] = await asyncio.to_thread(model_figures, 2 if bench.quick else 5, bench.folder / "model")
    result["rounds"] = rounds
    return result


def rows(r: dict) -> list[tuple]:
    ms = 1000
    b, f, m = r["bridge"], r["framing"], r["model"]
    echo = p50(b["echo"])
    crash, stop = p50(b["crash"]), p50(b["stop"])
    framing_ratio = f["buffer"] / f["floor"]
    init, base_init = p50(m["init"]), p50(m["scripted_init"])
    cancel, token = p50(m["cancel"]), p50(m["token"])
    return [
        (
            "Faults",
            f"crash mid-answer: first part seen → crash notice seen p50 (n={len(b['crash'])})",
            f"{crash * ms:.0f} ms",
            f"{echo * ms:.0f} ms (echo answer)",
            f"{crash / echo:.1f}×",
            "≤ 2 s",
            crash <= 2,
        ),
        (
            "Faults",
            f'🛑 on a streaming answer → "⏹ stopped" seen p50 (n={len(b["stop"])})',
            f"{stop * ms:.0f} ms",
            f"{echo * ms:.0f} ms (echo answer)",
            f"{stop / echo:.1f}×",
            "(info)",
            None,
        ),
        (
            "Faults",
            f"ACP framing: one {f['mib']} MiB line in 4 KiB pieces (floor: find + keep + join once)",
            f"{f['buffer'] * ms:.1f} ms",
            f"{f['floor'] * ms:.1f} ms",
            f"{framing_ratio:.2f}×",
            "≤ 2×",
            framing_ratio <= 2,
        ),
        (
            "Faults",
            "local model agent: process start → initialize answered p50",
            f"{init * ms:.0f} ms",
            f"{base_init * ms:.0f} ms (scripted agent)",
            f"{init / base_init:.1f}×",
            "≤ 3 s",
            init <= 3,
        ),
        (
            "Faults",
            "local model agent: session/cancel → cancelled reply p50",
            f"{cancel * ms:.0f} ms",
            f"{token * ms:.0f} ms (one token)",
            f"{cancel / token:.1f}×",
            "≤ 2 s",
            cancel <= 2,
        ),
    ]


def notes(r: dict) -> list[str]:
    return [
        f"faults: {r['rounds']} rounds each of echo, crash and 🛑 through one bridge, alternating; "
        "the local model runs SmolLM2 at temperature 0 (first prompt loads the model)"
    ]
