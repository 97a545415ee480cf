"""Hostile agents and strangers, fuzzed (docs/SECURITY.md): real hostile agent processes
(tests/agents/hostile_agent.py) send random ACP updates — kinds, sizes, nesting, unicode, floods —
while strangers send random Matrix events into the same rooms. Seeded, a few seconds.

Measured: no unexpected exception (an ERROR log fails the test), the event loop never stalls more
than 100 ms (its own stalls: the loop thread's CPU time, or its lateness less the time this
process's threads waited for a CPU, which the machine's other work decides),
nothing of one room reaches another, nothing of a stranger
reaches an agent. The homeserver is a local aiohttp server that records every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from bridge.bridge import Bridge, freeze_startup_objects
from bridge.matrix.appservice import Transaction
from bridge.matrix.puppet import Puppet
from config.loader import parse
from config.registration import Registration
from store import Store

OWNER, STRANGER = "@owner:localhost", "@stranger:localhost"
HOSTILE = Path(__file__).resolve().parents[2] / "agents" / "hostile_agent.py"
ROOMS = {"!a:localhost": ("alice",), "!b:localhost": ("bob",), "!g:localhost": ("alice", "bob")}
MAX_STALL = 0.100


class LoopLag:
    """The event loop's worst stall of its own. A task asks to wake every 5 ms; each time it is
    late, the stall is the larger of
    - the CPU time the loop thread spent meanwhile (`time.thread_time`): a callback that computes
      for 100 ms is a stall however busy the machine is, and
    - how late it woke, less the time any thread of this process waited for a CPU meanwhile
      (/proc/self/task/*/schedstat): the loop also waits, off the CPU, for the interpreter lock
      held by a thread the busy machine has descheduled (the database thread) — the machine's
      doing, not the bridge's — while a blocking call on the loop still counts in full."""

    def __init__(self, every: float = 0.005):
        self.every = every
        self.worst = 0.0  # the stall of its own, as above
        self.worst_wall = 0.0  # late, as the clock says
        self.samples = 0

    @staticmethod
    def _waited() -> float:
        """Seconds all threads of this process have waited for a CPU (run_delay), in all."""
        total = 0
        try:
            tasks = os.listdir("/proc/self/task")
        except OSError:
            return 0.0
        for tid in tasks:
            try:
                with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[1])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended meanwhile
        return total / 1e9

    async def run(self) -> None:
        while True:
            waited, cpu = self._waited(), time.thread_time()
            before = time.perf_counter()
            await asyncio.sleep(self.every)
            late = time.perf_counter() - before - self.every
            self.worst_wall = max(self.worst_wall, late)
            self.worst = max(self.worst, time.thread_time() - cpu, late - (self._waited() - waited))
            self.samples += 1


class Homeserver:
    """Answers every request 200 and records each event sent: (room, body text)."""

    def __init__(self):
        self.sent: list[tuple[str, str]] = []
        self.count = 0

    async def answer(self, request: web.Request) -> web.Response:
        self.count += 1
        parts = request.path.split("/")
        if "rooms" in parts and request.method == "PUT":
            room = unquote(parts[parts.index("rooms") + 1])
            self.sent.append((room, (await request.read()).decode("utf-8", "replace")))
        return web.json_response(
            {
                "event_id": f"$sent{self.count}",
                "room_id": "!new:localhost",
                "chunk": [],
                "content_uri": f"mxc://localhost/m{self.count}",
            }
        )


def stranger_event(rng: random.Random, n: int) -> dict:
    """A random event of a stranger: messages (also commands, mentions, a fake encrypted one),
    reactions, redactions, names, members, nonsense."""
    room = rng.choice(list(ROOMS))
    body = rng.choice(
        [
            f"stranger-secret-{n} [[fuzz:{n}:5]]",
            "!stop",
            "@alice hi stranger-secret",
            "1",
            "/alice:review stranger-secret",
            "!delete confirm",
            "\u202e" * rng.randint(0, 500),
        ]
    )
    kind, content = rng.choice(
        [
            (
                "m.room.message",
                {
                    "msgtype": "m.text",
                    "body": body,
                    "m.mentions": {"user_ids": ["@sk_alice:localhost", "@sk_bob:localhost"]},
                },
            ),
            (
                "m.reaction",
                {
                    "m.relates_to": {
                        "rel_type": "m.annotation",
                        "event_id": f"$sent{rng.randint(1, 50)}",
                        "key": rng.choice(["🛑", "1️⃣"]),
                    }
                },
            ),
            ("m.room.redaction", {}),
            ("m.room.name", {"name": "renamed by a stranger"}),
            (
                "m.room.encrypted",
                {
                    "algorithm": "m.megolm.v1.aes-sha2",
                    "ciphertext": "x",
                    "session_id": "s",
                    "sender_key": "k",
                    "device_id": "D",
                },
            ),
            ("m.room.tombstone", {"replacement_room": "!stolen:localhost"}),
            ("m.room.member", {"membership": rng.choice(["invite", "leave", "ban"])}),
            ("x.nonsense", {"deep": [[[[[{"a": "b" * rng.randint(0, 3000)}]]]]]}),
        ]
    )
    event = {"type": kind, "room_id": room, "sender": STRANGER, "event_id": f"$stranger{n}", "content": content}
    if kind in ("m.room.name", "m.room.tombstone"):
        event["state_key"] = ""
    if kind == "m.room.member":
        event["state_key"] = rng.choice(["@sk_alice:localhost", "@sk_bob:localhost"])
    if kind == "m.room.redaction":
        event["redacts"] = f"$owner{rng.randint(0, n)}"
    return event


async def test_hostile_agents_and_strangers_crash_nothing_stall_nothing_and_leak_nothing(tmp_path, caplog):
    caplog.set_level(logging.ERROR)
    homeserver = Homeserver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", homeserver.answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    logs = {name: tmp_path / f"{name}.log" for name in ("alice", "bob")}
    cfg = parse(
        {
            "owner": OWNER,
            "homeserver": {"url": url, "domain": "localhost"},
            "agents": {
                name: {"command": [sys.executable, str(HOSTILE), "--log", str(log)], "cwd": str(tmp_path)}
                for name, log in logs.items()
            },
            "limits": {"agents_in_memory": 2},
        },
        tmp_path / "config.yaml",
        "config.yaml",
    )
    registration = Registration("sidekicks", "http://127.0.0.1:1", "as", "hs", "sidekicks", "@sk_.*:localhost")
    store = Store.open(":memory:")
    for room_id, members in ROOMS.items():
        channel = store.create_channel(room_id, room_id[1], direct_agent=members[0] if len(members) == 1 else None)
        for member in members:
            store.add_member(channel.id, member)
    bridge = Bridge(cfg, registration, store)
    bridge.recovered.set()  # not started: no earlier run's turns to wait for
    bridge.session = aiohttp.ClientSession()
    bridge.bot = Puppet(cfg.bot_user_id, "Sidekicks", url, "as", bridge.session)
    freeze_startup_objects()  # as Bridge.start does once it is ready (this test does not start it)
    lag = LoopLag()
    watcher = asyncio.create_task(lag.run())
    rng = random.Random(26)
    asked: dict[str, list[str]] = {room: [] for room in ROOMS}
    try:
        for n in range(12):
            batch = []
            for room_id, members in ROOMS.items():
                secret = f"secret-{room_id[1]}-{n}"
                asked[room_id].append(secret)
                prompt = f"[[fuzz:{n * 10 + len(batch)}:{rng.choice([20, 60, 150])}]] {secret}"
                if n == 5 and room_id == "!a:localhost":
                    prompt += " [[bytes:2000000]] [[amps:20000]]"  # a flood, and HTML that grows
                if len(members) > 1:
                    prompt = f"@{rng.choice(members)} {prompt}"
                batch.append(
                    {
                        "type": "m.room.message",
                        "room_id": room_id,
                        "sender": OWNER,
                        "event_id": f"$owner{n}{room_id[1]}",
                        "content": {"msgtype": "m.text", "body": prompt},
                    }
                )
                batch.extend(stranger_event(rng, n * 10 + i) for i in range(rng.randint(1, 4)))
            rng.shuffle(batch)
            await bridge.dispatcher.transaction(Transaction(f"fuzz{n}", batch))
            workers = [w for p in bridge.portals.values() for w in p.workers()]
            await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), 120)
    finally:
        watcher.cancel()
        await bridge.pool.close()
        await bridge.session.close()
        await server.close()
        store.close()

    errors = [(r.getMessage(), r.exc_text) for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors
    assert lag.samples > 100
    assert lag.worst <= MAX_STALL, f"the loop stalled {lag.worst * 1000:.0f} ms (wall {lag.worst_wall * 1000:.0f} ms)"
    # every owner message was answered, in its own room; no room's text reached another
    for room_id, secrets in asked.items():
        mine = "\n".join(body for room, body in homeserver.sent if room == room_id)
        assert all(secret in mine for secret in secrets), (room_id, [s for s in secrets if s not in mine])
        others = [s for other, ss in asked.items() if other != room_id for s in ss]
        assert not [s for s in others if s in mine], room_id
    assert not any(room == "!stolen:localhost" for room, _ in homeserver.sent)
    # nothing a stranger wrote reached an agent
    for log in logs.values():
        prompts = [
            json.dumps(m["params"]["prompt"])
            for m in map(json.loads, log.read_text().splitlines())
            if m.get("method") == "session/prompt"
        ]
        assert prompts and not any("stranger" in p for p in prompts)
    print(
        f"\nfuzz: {sum(len(s) for s in asked.values())} owner messages, {len(homeserver.sent)} events sent, "
        f"loop stall {lag.worst * 1000:.1f} ms (wall {lag.worst_wall * 1000:.1f} ms)"
    )
