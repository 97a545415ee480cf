"""Throughput: 50 channels, instant agents, 200 prompts/s offered for 30 s (2 s with --quick).

10 scripted agents (instant echo), each the direct agent of 5 DMs; agents_in_memory 10 so none is
ever evicted. Prompts go round-robin over the channels at the offered rate, each sent as soon as
its time comes (not waiting for earlier sends). Nothing lost means: the store holds every prompt
as a user message and one agent answer for each. The same load is offered to the echo floor
(50 rooms) first, as the homeserver's own ceiling.
"""

from __future__ import annotations

import asyncio
import collections
import re

import aiohttp
from bridge_harness import agent, start_bridge
from common import Bench, Owner, now, on_time
from floor import EchoFloor

CHANNELS, AGENTS, RATE = 50, 10, 200


class RequestCount:
    """Homeserver requests the bridge makes, by kind, while `counting` (wraps the nio send and
    the raw request of bridge.matrix.client.AppserviceClient, which are all its requests)."""

    KINDS = (
        ("message", re.compile(r"/send/m\.room\.message/")),
        ("receipt", re.compile(r"/receipt/")),
        ("typing", re.compile(r"/typing/")),
    )

    def __init__(self):
        from bridge.matrix.client import AppserviceClient

        self.counts: collections.Counter = collections.Counter()
        self.counting = False
        self._cls = AppserviceClient
        self._send, self._raw = AppserviceClient.send, AppserviceClient.raw
        counter = self

        async def send(client, method, path, *args, **kwargs):
            counter.note(path)
            return await counter._send(client, method, path, *args, **kwargs)

        async def raw(client, method, path, *args, **kwargs):
            counter.note(path)
            return await counter._raw(client, method, path, *args, **kwargs)

        AppserviceClient.send, AppserviceClient.raw = send, raw

    def note(self, path: str) -> None:
        if self.counting:
            kind = next((name for name, pattern in self.KINDS if pattern.search(path)), "other")
            self.counts[kind] += 1

    def close(self) -> None:
        self._cls.send, self._cls.raw = self._send, self._raw


async def _offer(owner: Owner, rooms: list[str], seconds: float, prefix: str) -> dict:
    sent, failed = [], 0
    tasks = []

    async def one(room: str, text: str) -> None:
        nonlocal failed
        try:
            await owner.send_text(room, text)
            sent.append(now())
        except Exception:
            failed += 1

    total = int(RATE * seconds)
    t0 = now()
    async for i in on_time(t0, total, RATE):
        tasks.append(asyncio.create_task(one(rooms[i % len(rooms)], f"{prefix}-{i}")))
    offered_s = now() - t0
    await asyncio.gather(*tasks)
    return {
        "t0": t0,
        "offered": total,
        "offered_s": offered_s,
        "sent": len(sent),
        "failed": failed,
        "send_s": max(sent) - t0 if sent else float("nan"),
    }


async def run(bench: Bench, http: aiohttp.ClientSession, owner: Owner) -> dict:
    seconds = 2 if bench.quick else 30
    drain = 120 if bench.quick else 900
    out: dict = {"seconds": seconds}

    # ---- floor ----
    floor = EchoFloor(bench.url, bench.floor_registration, bench.floor_port)
    await floor.start()
    try:
        rooms = []
        for _ in range(CHANNELS):
            room = await owner.create_room(invite=[floor.bot])
            await floor.join(room)
            rooms.append(room)
        offer = await _offer(owner, rooms, seconds, "bench-tf")
        deadline = now() + drain
        while floor.answered < offer["sent"] and now() < deadline:
            await asyncio.sleep(0.05)
        done = now()
        out["floor"] = {**offer, "answered": floor.answered, "all_s": done - offer["t0"]}
    finally:
        await floor.stop()

    # ---- bridge ----
    names = [f"t{i}" for i in range(AGENTS)]
    running = await start_bridge(
        bench,
        bench.folder / "bridge-throughput",
        {name: agent(title=f"T{name}") for name in names},
        limits={"agents_in_memory": AGENTS},
    )
    store = running.store
    requests = RequestCount()
    try:
        rooms = []
        for i in range(CHANNELS):
            puppet = f"@sk_{names[i % AGENTS]}:localhost"
            room = await owner.create_room(invite=[puppet], direct=True)
            rooms.append(room)
        for i, room in enumerate(rooms):
            await owner.wait_joined(room, f"@sk_{names[i % AGENTS]}:localhost", 60)
        channels = [store.channel_by_room(room) for room in rooms]

        def counts() -> tuple[int, int]:
            users = agents = 0
            for channel in channels:
                for m in store.last_messages(channel.id, 100_000):
                    if m.role == "user":
                        users += 1
                    else:
                        agents += 1
            return users, agents

        for room in rooms:  # warm up: each agent started, each channel's session open
            await owner.send_text(room, "bench-warm")
        deadline = now() + 120
        while counts()[1] < CHANNELS and now() < deadline:
            await asyncio.sleep(0.2)
        base_users, base_agents = counts()
        requests.counting = True
        offer = await _offer(owner, rooms, seconds, "bench-tb")
        in_window = counts()[1] - base_agents
        deadline = now() + drain
        timeline = []
        while now() < deadline:
            users, agents = counts()
            timeline.append((now(), agents - base_agents))
            if agents - base_agents >= offer["sent"]:
                break
            await asyncio.sleep(0.25)
        requests.counting = False
        users, agents = counts()
        done = next((t for t, n in timeline if n >= offer["sent"]), now())
        out["bridge"] = {
            **offer,
            "stored_prompts": users - base_users,
            "answered": agents - base_agents,
            "answered_in_window": in_window,
            "all_s": done - offer["t0"],
            "requests": dict(requests.counts),
        }
    finally:
        requests.close()
        await running.stop()
    return out


def rows(r: dict) -> list[tuple]:
    b, f = r["bridge"], r["floor"]
    b_rate, f_rate = b["answered"] / b["all_s"], f["answered"] / f["all_s"]
    lost = b["sent"] - b["answered"]
    return [
        (
            "Throughput",
            f"{CHANNELS} channels, {RATE}/s offered for {r['seconds']} s: prompts sent",
            f"{b['sent']}/{b['offered']} in {b['send_s']:.1f} s",
            f"{f['sent']}/{f['offered']} in {f['send_s']:.1f} s",
            "",
            "(info)",
            None,
        ),
        (
            "Throughput",
            "achieved rate (answers finished / time to the last one)",
            f"{b_rate:.1f}/s",
            f"{f_rate:.1f}/s (floor)",
            f"{b_rate / f_rate:.2f}×",
            "(info)",
            None,
        ),
        (
            "Throughput",
            "answers finished within the offered window",
            f"{b['answered_in_window']}",
            "",
            "",
            "(info)",
            None,
        ),
        (
            "Throughput",
            "prompts lost (sent but never stored or never answered)",
            f"{lost} (stored {b['stored_prompts']}, answered {b['answered']})",
            f"{f['sent'] - f['answered']}",
            "",
            "0",
            lost == 0,
        ),
        (
            "Throughput",
            "homeserver requests per answer (messages + edits, receipts, typing, other)",
            _per_answer(b),
            "1.00 (one message)",
            f"{sum(b['requests'].values()) / max(b['answered'], 1):.2f}×",
            "(info)",
            None,
        ),
    ]


def _per_answer(b: dict) -> str:
    n = max(b["answered"], 1)
    r = b["requests"]
    parts = " + ".join(f"{r.get(kind, 0) / n:.2f}" for kind in ("message", "receipt", "typing", "other"))
    return f"{sum(r.values()) / n:.2f} ({parts})"


def notes(r: dict) -> list[str]:
    b = r["bridge"]
    return [
        f"throughput: the bridge took {b['all_s']:.1f} s to answer the {b['sent']} prompts offered in "
        f"{b['offered_s']:.1f} s; the floor {r['floor']['all_s']:.1f} s."
    ]
