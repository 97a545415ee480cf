"""An ACP client attached through `sidekicks acp` vs the same agent driven directly by that client
(docs/sessions.md "Attach an editor"): a prompt written by the client → the first
`agent_message_chunk` it reads.

Two agents, each once behind the running bridge (the client attached to the agent's DM, the
prompt routed, stored and queued as a room message, quoted in the room, the agent's update
forwarded back) and once started by the client itself, the two sides taking turns round by
round, so both see the same machine load:

- the scripted echo agent (tests/agents/scripted_agent.py), answering in about a millisecond:
  what the bridge adds, in ms;
- the shipped local agent (acp.agents.local_model, SmolLM2, temperature 0, answers cut at 24
  tokens), warm: what an editor attached to a real agent sees. The goal is judged on it.

Beside them: the room's side of each attached round — the prompt's quote and the answer's first
text as the owner's `/sync` shows them — against the same prompt typed by the owner in a second
DM with the agent, once a round (the way it went before a client could attach; no later is the
goal; a DM of its own keeps the attached session as long as the direct side's), and a bare round
trip through `sidekicks acp` and the socket (`authenticate`, answered at once): the two process
hops every attached prompt pays. Each prompt waits until the agents have used no CPU for 0.2 s
(the local agent prepares its next turn after an answer: that work would fall on whichever side
came next). The first round of each side is left out (the agent's start, cold caches). Goal:
≤ 1.10× the direct side.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from acp_client import AcpClient  # noqa: E402
from bridge_harness import SCRIPTED, start_bridge, wait_until  # noqa: E402
from common import STATUS_PREFIXES, body_of, median, p99  # noqa: E402

import config as configuration  # noqa: E402
from bridge.attach import wire  # noqa: E402

GOAL = 1.10
MAX_TOKENS = 24
AGENTS = {
    # name: (the agent's command after the interpreter, rounds of a full run, of a quick run)
    "echo": ([str(SCRIPTED), "--echo-last-line"], 40, 10),
    "local": (["-m", "acp.agents.local_model", "--temperature", "0", "--max-tokens", str(MAX_TOKENS)], 16, 6),
}
MARKERS = {"echo": SCRIPTED.name.encode(), "local": b"acp.agents.local_model"}  # in both sides' command lines


async def first_text(client: AcpClient, session: str, text: str) -> tuple[float, float]:
    """(seconds from the prompt written to the first agent text the client reads, when it was
    written: perf_counter) — the prompt over."""
    seen = len(client.received)
    began = time.perf_counter()
    await client.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    for message, when in zip(client.received[seen:], client.arrived[seen:], strict=True):
        update = (message.get("params") or {}).get("update") or {}
        if message.get("method") == "session/update" and update.get("sessionUpdate") == "agent_message_chunk":
            return when - began, began
    raise AssertionError("no agent text came")


async def in_room(owner, room: str, puppet: str, text: str, began: float) -> tuple[float, float]:
    """(the quote of `text`, the first text of its answer after it): seconds after `began`, as
    the owner's sync saw them. The answer's text shown: an event of the agent's, not a notice,
    not a bare status line."""
    quote = f"💻 from Zed: {text}"

    def found():
        events = owner.events.get(room, [])
        at = next((i for i, (_, e) in enumerate(events) if body_of(e) == quote), None)
        if at is None:
            return None
        for seen, event in events[at + 1 :]:
            body = body_of(event)
            content = event.get("content") or {}
            kind = (content.get("m.new_content") or content).get("msgtype")
            if event.get("sender") == puppet and kind != "m.notice" and body and not body.startswith(STATUS_PREFIXES):
                return events[at][0] - began, seen - began
        return None

    return await owner.wait_for(found, timeout=120)


async def typed(running, owner, room: str, puppet: str, text: str) -> float:
    """A message typed in the room, as before any client was attached: seconds from its send to
    its answer's first text in the owner's sync (what the attached prompt's room side is held
    to); returns once its turn is over."""
    began = time.perf_counter()
    event_id = await owner.send_text(room, text)

    def found():
        events = owner.events.get(room, [])
        at = next((i for i, (_, e) in enumerate(events) if e.get("event_id") == event_id), None)
        if at is None:
            return None
        for seen, event in events[at + 1 :]:
            body, content = body_of(event), event.get("content") or {}
            kind = (content.get("m.new_content") or content).get("msgtype")
            if event.get("sender") == puppet and kind != "m.notice" and body and not body.startswith(STATUS_PREFIXES):
                return seen - began
        return None

    shown = await owner.wait_for(found, timeout=120)
    await running.idle(timeout=120)
    return shown


def cpu_ticks(marker: bytes) -> int:
    """CPU time (clock ticks) used so far by the processes whose command line holds `marker`."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if marker not in f.read():
                    continue
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


async def quiet(marker: bytes, still: float = 0.2, timeout: float = 30) -> None:
    """Until the agents (both sides') have used no CPU for `still` seconds: a prompt meets an
    agent at rest, as one typed a while after the last answer does — not the agent's own work
    after its last turn (the local agent's preparation of the next), which would fall on
    whichever side came next."""
    deadline = time.monotonic() + timeout
    last = cpu_ticks(marker)
    while time.monotonic() < deadline:
        await asyncio.sleep(still)
        now_ticks = cpu_ticks(marker)
        if now_ticks == last:
            return
        last = now_ticks


async def hop(client: AcpClient) -> float:
    """One request through `sidekicks acp` and the socket, answered at once."""
    began = time.perf_counter()
    await client.call("authenticate", {"methodId": "none"})
    return time.perf_counter() - began


def command_of(name: str, folder: Path, side: str) -> list[str]:
    """The agent's command line; the local agent keeps each side's sessions apart."""
    command = [sys.executable, *AGENTS[name][0]]
    return [*command, "--sessions", str(folder / f"sessions-{side}")] if name == "local" else command


async def sides(folder: Path, name: str, attached: AcpClient, session: str):
    """The directly driven agent, started by its client, and the two sides' (client, session)."""
    direct = await AcpClient.spawn(command_of(name, folder, "direct"), {})
    await direct.initialize()
    own = (await direct.call("session/new", {"cwd": str(folder), "mcpServers": []}))["sessionId"]
    return direct, {"attached": (attached, session), "direct": (direct, own)}


async def rounds_of(running, owner, rooms: dict, clients: dict, rounds: int, marker: bytes) -> dict:
    times: dict[str, list] = {"attached": [], "direct": [], "quote": [], "room": [], "hop": [], "typed": []}
    for i in range(rounds + 1):
        # the typed message first: what its turn leaves running (the room's last edits, the
        # agent's own work after a turn) meets each side as often as the other
        await quiet(marker)
        typed_shown = await typed(running, owner, *rooms["typed"], f"Say hello to round {i}.")
        if i:
            times["typed"].append(typed_shown)
        order = ("attached", "direct") if i % 2 == 0 else ("direct", "attached")
        for side in order:
            client, where = clients[side]
            text = f"Say hello to round {i}."
            await quiet(marker)
            took, began = await first_text(client, where, text)
            if side == "attached":
                quote, shown = await in_room(owner, *rooms["attached"], text, began)
                if i:
                    times["quote"].append(quote)
                    times["room"].append(shown)
                    times["hop"].append(await hop(client))
            if i:  # the first round of each side is left out
                times[side].append(took)
    return times


async def run_agent(bench, owner, folder: Path, name: str) -> dict:
    _, full, quick = AGENTS[name]
    rounds = int(os.environ.get("SIDEKICKS_BENCH_ATTACH_ROUNDS") or (quick if bench.quick else full))
    xdg, config_folder = folder / "xdg", folder / f"bridge-{name}"
    data = xdg / "sidekicks" / "data" / configuration.config_hash(config_folder / "config.yaml")
    entry = {"command": command_of(name, folder, "attached"), "title": name.title()}
    # the typed side's twin: the same agent in a process of its own, so that the attached
    # agent holds one session, as the direct side does (a second one makes the local agent
    # switch states between them)
    twin = {"command": command_of(name, folder, "typed"), "title": f"{name.title()} typed"}
    running = await start_bridge(bench, config_folder, {name: entry, f"{name}-typed": twin}, data_dir=data)
    puppet = f"@sk_{name}:localhost"
    attached = direct = None
    try:
        room = await owner.create_room(invite=[puppet], direct=True)
        await owner.wait_joined(room, puppet)
        await wait_until(lambda: running.store.channel_by_room(room) is not None, what="the DM is a channel")
        session = wire.session_id(running.store.channel_by_room(room).id, "")
        attached = await AcpClient.start(running.config.path, xdg, agent=name)
        await attached.initialize()
        await attached.call("session/resume", {"sessionId": session, "cwd": "/", "mcpServers": []})
        # the typed messages in a DM of their own: the attached session stays as long as the
        # direct side's (a longer conversation alone makes the local agent slower)
        typed_puppet = f"@sk_{name}-typed:localhost"
        typed_room = await owner.create_room(invite=[typed_puppet], direct=True)
        await owner.wait_joined(typed_room, typed_puppet)
        await wait_until(lambda: running.store.channel_by_room(typed_room) is not None, what="the DM is a channel")
        direct, clients = await sides(folder, name, attached, session)
        rooms = {"attached": (room, puppet), "typed": (typed_room, typed_puppet)}
        times = await rounds_of(running, owner, rooms, clients, rounds, MARKERS[name])
        return {"rounds": rounds, "times": times, "load": os.getloadavg()[0]}
    finally:
        for client in (attached, direct):
            if client is not None:
                await client.close()
        await running.stop()


async def run(bench, owner, folder: Path) -> dict:
    """Each agent (`SIDEKICKS_BENCH_ATTACH_AGENTS=local` for one: a longer run of it alone,
    `SIDEKICKS_BENCH_ATTACH_ROUNDS=N` rounds)."""
    chosen = os.environ.get("SIDEKICKS_BENCH_ATTACH_AGENTS", ",".join(AGENTS)).split(",")
    return {name: await run_agent(bench, owner, folder, name) for name in AGENTS if name in chosen}


def _ms(values: list[float]) -> str:
    return f"{median(values) * 1e3:.1f} / {p99(values) * 1e3:.1f} ms"


def paired(times: dict) -> float:
    """The median of each round's attached / direct: the two sides of a round saw the same load."""
    return median([a / d for a, d in zip(times["attached"], times["direct"], strict=True)])


def rows(r: dict) -> list[tuple]:
    made = []
    for name, what in (("echo", "scripted echo agent"), ("local", "local agent, warm")):
        if name not in r:
            continue
        found = r[name]
        times = found["times"]
        attached, direct = median(times["attached"]), median(times["direct"])
        made.append(
            (
                "Attach",
                f"ACP client prompt → first agent text, {what}, p50 / p99 ({found['rounds']} each, alternating)",
                _ms(times["attached"]),
                _ms(times["direct"]),
                f"{attached / direct:.2f}× (paired {paired(times):.2f}×)",
                f"≤ {GOAL:.2f}×" if name == "local" else "(info)",
                attached / direct <= GOAL if name == "local" else None,
            )
        )
        room, typed_room = median(times["room"]), median(times["typed"])
        made.append(
            (
                "Attach",
                f"room: prompt → quote / → first answer text, {what}, p50 (baseline: a message typed there)",
                *_room(times),
                "no later",
                room <= typed_room if name == "local" else None,
            )
        )
    return made


def _room(times: dict) -> tuple[str, str, str]:
    room, typed_room = median(times["room"]), median(times["typed"])
    return (
        f"{median(times['quote']) * 1e3:.0f} / {room * 1e3:.0f} ms",
        f"typed: {typed_room * 1e3:.0f} ms; round trip through `sidekicks acp`: {median(times['hop']) * 1e3:.1f} ms",
        f"{room / typed_room:.2f}×",
    )


def notes(r: dict) -> list[str]:
    loads = ", ".join(f"{name} {found['load']:.1f}" for name, found in r.items())
    return [
        "attach: the prompt is taken under its transaction id and asked of the agent while its quote "
        "is sent; the answer's first event waits for the quote's send "
        f'(docs/sessions.md "Attach an editor"); load average at the end: {loads}'
    ]
