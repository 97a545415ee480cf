"""Sustained load against the real Synapse: messages offered over 50 rooms, each answered by a
fast scripted agent — first-answer latency, messages lost, who spends the CPU.

The bridge runs in a process of its own (bridge_proc.py) with five scripted agents answering at
once (`--echo-last-line`: "echo: <the message>"), each the direct agent of 10 of the 50 DMs.
The owner is the bench's raw client (common.Owner): each message is sent when its time comes
(not waiting for earlier sends), round robin over the rooms; its first answer is the first
event of the room's agent whose body is "echo: <its marker>", as the owner's /sync sees it.

Two phases:
    ramp       RAMP rates, STEP seconds each, one after the other (each drained before the
               next): p50/p99 first answer, answers per second, and the CPU of Synapse and of
               the bridge (utime + stime from /proc, in % of a core) — where it saturates
    sustained  RATE messages/s for SECONDS (300; 60 with --quick) if the ramp kept up with it;
               otherwise at the highest ramp rate that kept up, or, if none did, at 80 % of the
               best answer rate the ramp reached (said in the table)
"Kept up": the answers came at ≥ 95 % of the offered rate and p99 stayed under 5 s. Lost: sent
and never answered, counted in the bridge's store once it is stopped (every owner message stored,
one agent answer each) — the owner's view can miss events of a limited /sync, the store cannot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from pathlib import Path

import bench_scale
from bridge_harness import agent, write_config
from common import Bench, Owner, body_of, now, on_time, p50, p99, start_bridge_proc, stop_by_stdin

from store.connect import DB_FILE

ROOMS, AGENTS = 50, 5
RATE = 100
RAMP = (10, 25, 50, 100)
KEPT_UP = 0.95


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError):
            out[name] = bench_scale.cpu_s(pid)
    return out


async def _offer(owner: Owner, rooms: list[str], rate: float, seconds: float, prefix: str) -> list[tuple]:
    """Send rate × seconds messages on time; [(marker, room, sent_at or None)]."""
    sent: list[list] = []

    async def one(entry: list) -> None:
        entry[2] = now()
        try:
            await owner.send_text(entry[1], entry[0])
        except Exception:
            entry[2] = None

    tasks = []
    total = round(rate * seconds)
    async for i in on_time(now(), total, rate):
        entry = [f"{prefix}-{i}", rooms[i % len(rooms)], None]
        sent.append(entry)
        tasks.append(asyncio.create_task(one(entry)))
    await asyncio.gather(*tasks)
    return [tuple(e) for e in sent]


class Answers:
    """marker → when the owner saw its first answer (the agents' events of the rooms), read
    incrementally: each sync's new events once, so a long run does not rescan its history."""

    def __init__(self, owner: Owner, rooms: dict[str, str]) -> None:
        self.owner, self.rooms = owner, rooms
        self.seen: dict[str, float] = {}
        self._read: dict[str, int] = {}

    def update(self) -> dict[str, float]:
        for room, agent_id in self.rooms.items():
            events = self.owner.events.get(room, [])
            for at, event in events[self._read.get(room, 0) :]:
                if event.get("sender") == agent_id and event.get("type") == "m.room.message":
                    body = body_of(event)
                    if body.startswith("echo: "):
                        self.seen.setdefault(body[6:].strip(), at)
            self._read[room] = len(events)
        return self.seen


async def _phase(owner, rooms, answers: Answers, rate, seconds, prefix, pids, drain) -> dict:
    c0, t0 = _cpu(pids), now()
    sent = await _offer(owner, list(rooms), rate, seconds, prefix)
    offered_s = now() - t0
    ok = [s for s in sent if s[2] is not None]
    deadline = now() + drain

    def answered():
        seen = answers.update()
        return all(m in seen for m, _, _ in ok)

    with contextlib.suppress(TimeoutError):
        await owner.wait_for(answered, max(deadline - now(), 1))
    seen = answers.update()
    found = {m: seen[m] for m, _, _ in ok if m in seen}
    c1, t1 = _cpu(pids), now()
    latencies = [found[m] - at for m, _, at in ok if m in found]
    last = max(found.values(), default=t0)
    return {
        "rate": rate,
        "seconds": seconds,
        "offered": len(sent),
        "sent": len(ok),
        "seen": len(found),
        "p50": p50(latencies),
        "p99": p99(latencies),
        "answer_rate": len(found) / max(last - t0, offered_s),
        "cpu": {k: (c1[k] - c0[k]) / (t1 - t0) for k in c1 if k in c0},
        "cpu_s": {k: c1[k] - c0[k] for k in c1 if k in c0},
        "load": os.getloadavg()[0],
    }


def kept_up(phase: dict) -> bool:
    return phase["answer_rate"] >= KEPT_UP * phase["rate"] and phase["p99"] < 5


def _stored(data: Path) -> tuple[int, int]:
    with sqlite3.connect(f"file:{data / DB_FILE}?mode=ro", uri=True, timeout=30) as db:
        rows = dict(db.execute("SELECT role, count(*) FROM sk_message GROUP BY role").fetchall())
    return rows.get("user", 0), rows.get("agent", 0)


async def run(bench: Bench, owner: Owner, folder: Path) -> dict:
    seconds = 60 if bench.quick else 300
    step = 10 if bench.quick else 20
    names = [f"s{i}" for i in range(AGENTS)]
    config_path = write_config(
        bench, folder / "cfg", {n: agent("--echo-last-line", title=n.upper()) for n in names}, encryption="off"
    )
    data = folder / "data"
    proc, _ = await start_bridge_proc(config_path, data, timeout=300)
    out: dict = {"ramp": [], "seconds": seconds}
    try:
        pids = {"synapse": bench.server._proc.pid, "bridge": proc.pid}
        rooms: dict[str, str] = {}
        for i in range(ROOMS):
            puppet = f"@sk_{names[i % AGENTS]}:localhost"
            rooms[await owner.create_room(invite=[puppet], direct=True)] = puppet
        for room, puppet in rooms.items():
            await owner.wait_joined(room, puppet, 120)
        answers = Answers(owner, rooms)
        warm = await _phase(owner, rooms, answers, 10, len(rooms) / 10, "warm", pids, 120)  # every session open
        out["warm"] = warm
        best = None
        for rate in RAMP:
            phase = await _phase(owner, rooms, answers, rate, step, f"r{rate}", pids, 120)
            out["ramp"].append(phase)
            print(
                f"  ramp {rate}/s: p50 {phase['p50'] * 1000:.0f} ms, p99 {phase['p99'] * 1000:.0f} ms, "
                f"{phase['answer_rate']:.1f} answers/s, cpu {phase['cpu']}",
                flush=True,
            )
            if not kept_up(phase):
                break
            best = rate
        # none kept up: 80 % of the best answer rate the ramp reached, what the machine takes now
        rate = best or max(1.0, round(0.8 * max(p["answer_rate"] for p in out["ramp"]), 1))
        out["sustained_rate"] = rate
        out["sustained"] = await _phase(owner, rooms, answers, rate, seconds, f"s{rate}", pids, 600)
    finally:
        await stop_by_stdin(proc, timeout=60)
    out["stored"] = _stored(data)
    out["sent_total"] = (
        out["warm"]["sent"] + sum(p["sent"] for p in out["ramp"]) + out.get("sustained", {}).get("sent", 0)
    )
    return out


def _cpu_text(phase: dict) -> str:
    """Each one's share of a core over the phase, and its CPU time per answer: the second does
    not depend on what else the machine runs, so it tells where a free machine saturates."""
    cpu, spent, n = phase["cpu"], phase.get("cpu_s", {}), max(phase["seen"], 1)
    return ", ".join(
        f"{name} {cpu.get(key, 0) * 100:.0f} % of a core, {spent.get(key, 0) / n * 1000:.1f} ms an answer"
        for key, name in (("synapse", "Synapse"), ("bridge", "bridge"))
    )


def rows(r: dict) -> list[tuple]:
    out = []
    for p in r["ramp"]:
        out.append(
            (
                "Sustained",
                f"ramp: {p['rate']}/s offered for {p['seconds']} s over {ROOMS} rooms (load {p['load']:.1f})",
                f"p50 {p['p50'] * 1000:.0f} / p99 {p['p99'] * 1000:.0f} ms; {p['answer_rate']:.1f} answers/s",
                _cpu_text(p),
                "",
                "kept up" if kept_up(p) else "saturated",
                None,
            )
        )
    s = r.get("sustained")
    if s:
        lowered = r["sustained_rate"] != RATE
        out.append(
            (
                "Sustained",
                f"{s['rate']:g}/s for {s['seconds']} s over {ROOMS} rooms"
                + (f" ({RATE}/s saturated the homeserver)" if lowered else "")
                + f" (load {s['load']:.1f})",
                f"p50 {s['p50'] * 1000:.0f} / p99 {s['p99'] * 1000:.0f} ms; {s['answer_rate']:.1f} answers/s",
                _cpu_text(s),
                "",
                f"{RATE}/s",
                not lowered and kept_up(s),
            )
        )
    users, agents = r["stored"]
    lost = r["sent_total"] - agents
    out.append(
        (
            "Sustained",
            "messages lost (sent, not answered in the store)",
            f"{lost} (sent {r['sent_total']}, stored {users}, answered {agents})",
            "",
            "",
            "0",
            lost == 0 and users == r["sent_total"],
        )
    )
    return out


def notes(r: dict) -> list[str]:
    return [
        "sustained: CPU in % of one core over each phase (offer and drain), and CPU time per answer "
        "(the bridge's includes its agents' I/O, not their processes); the machine has 2 cores shared "
        "with other work: the load average is given with each figure. Synapse is one process: one "
        "core at most, so 1,000 / its ms an answer is its ceiling on a free core."
    ]
