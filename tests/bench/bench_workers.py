"""Synapse with workers vs one Synapse process: N people × 3 agents, sides taking turns.

    python -m tests.bench.bench_workers [--users 5 20] [--rounds 3]

Both homeservers run for the whole benchmark on PostgreSQL (tests/synapse_workers.py: the worker
setup — main, generic worker, event persister, appservice sender, Redis, nginx — and the same
Synapse as one process). For each number of people, each side in turn (the side that goes first
alternates): one bridge per person (its own registration, puppet prefix and owner), 3 instant
echo agents each, a DM per agent; a warm-up round (the agents start), then `--rounds` rounds in
which every person writes to each of their agents at once.

Figures per side: first-answer latency (owner's send → the first event of the puppet in that
DM, seen by the owner's /sync), p50 and p99; messages lost (no final answer within 120 s: must be
0); Synapse CPU per message (user+system of every homeserver process: the Synapse processes,
Redis and nginx) and bridge CPU per message (this process: the bridges, and the owners' bare
aiohttp clients, the same on both sides; the agents are not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT, ROOT / "tests", ROOT / "tests" / "bench"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import aiohttp  # noqa: E402
from bridge_harness import agent, start_bridge  # noqa: E402
from common import Owner, body_of, now, p50, p99  # noqa: E402
from synapse_workers import Person, WorkersHomeserver, synapse_with_workers  # noqa: E402

AGENTS = ("alice", "bob", "carol")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pids: list[int]) -> float:
    """User + system CPU seconds of `pids` so far (0 for one that is gone)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def homeserver_pids(hs: WorkersHomeserver) -> list[int]:
    assert hs.workers is not None
    pids = [p.pid for p in hs.workers.procs.values()]
    if hs.server._proc is not None:
        pids.append(hs.server._proc.pid)
    # nginx's worker is a child of its master
    for pid in list(pids):
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        pids.extend(int(child) for child in children)
    return pids


async def one_side(hs: WorkersHomeserver, people: list[Person], rounds: int, folder: Path) -> dict:
    bridges, owners = [], []
    async with aiohttp.ClientSession() as http:
        try:
            for person in people:
                view = hs.as_person(person)
                agents = {name: agent("--echo-last-line", title=name) for name in AGENTS}
                bridges.append(await start_bridge(view, folder / person.name, agents))
            rooms: dict[tuple[int, str], str] = {}
            for i, person in enumerate(people):
                owner = Owner(hs.url, http)
                await owner.login(person.user_id, person.password)
                owner.start_sync()
                owners.append(owner)
                for name in AGENTS:
                    rooms[(i, name)] = await owner.create_room(invite=[person.puppet(name)], direct=True)
            for (i, name), room_id in rooms.items():
                await owners[i].wait_joined(room_id, people[i].puppet(name), timeout=120)

            async def ask(i: int, name: str, text: str) -> tuple[float | None, bool]:
                owner, room_id, puppet = owners[i], rooms[(i, name)], people[i].puppet(name)
                start = now()
                await owner.send_text(room_id, text)

                def first():
                    return next(
                        (t for t, e in owner.events.get(room_id, []) if e.get("sender") == puppet and t >= start), None
                    )

                def final():
                    return any(
                        e.get("sender") == puppet and body_of(e) == f"echo: {text}"
                        for _, e in owner.events.get(room_id, [])
                    )

                try:
                    seen = await owner.wait_for(first, 120)
                    await owner.wait_for(final, 120)
                except TimeoutError:
                    return None, False
                return seen - start, True

            async def one_round(label: str) -> list[tuple[float | None, bool]]:
                return await asyncio.gather(
                    *(ask(i, name, f"{label} {i} {name}") for i in range(len(people)) for name in AGENTS)
                )

            await one_round("warm-up")
            pids = homeserver_pids(hs)
            synapse_before, bridge_before = cpu_of(pids), time.process_time()
            results = []
            for r in range(rounds):
                results.extend(await one_round(f"round {r}"))
            synapse_cpu, bridge_cpu = cpu_of(pids) - synapse_before, time.process_time() - bridge_before
        finally:
            for owner in owners:
                await owner.stop_sync()
            for running in reversed(bridges):
                await running.stop()
    latencies = [latency for latency, _ in results if latency is not None]
    messages = len(results)
    return {
        "messages": messages,
        "lost": sum(1 for _, done in results if not done),
        "p50_ms": p50(latencies) * 1000,
        "p99_ms": p99(latencies) * 1000,
        "synapse_cpu_ms_per_msg": synapse_cpu / messages * 1000,
        "bridge_cpu_ms_per_msg": bridge_cpu / messages * 1000,
    }


async def main(args) -> int:
    # people of their own for each size: a bridge stopped leaves Synapse backing off on its
    # appservice, and with workers the start-up ping does not cut that short (docs/performance.md)
    total = sum(args.users)
    folder = Path(tempfile.mkdtemp(prefix="sidekicks-bench-workers-"))
    rows = []
    async with synapse_with_workers(folder / "workers", tuple(Person(f"u{i}") for i in range(total))) as workers:
        async with synapse_with_workers(
            folder / "single", tuple(Person(f"u{i}") for i in range(total)), False
        ) as single:
            sides = [("workers", workers), ("single", single)]
            first = 0
            for turn, users in enumerate(args.users):
                for name, hs in sides if turn % 2 == 0 else reversed(sides):
                    people = hs.people[first : first + users]
                    figures = await one_side(hs, people, args.rounds, folder / f"{name}-{users}")
                    rows.append((users, name, figures))
                    print(users, name, figures, flush=True)
                first += users
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    print("| people × 3 agents | side | messages | lost | first answer p50 | p99 | Synapse CPU/msg | bridge CPU/msg |")
    print("|---|---|---|---|---|---|---|---|")
    for users, name, f in rows:
        print(
            f"| {users} | {name} | {f['messages']} | {f['lost']} | {f['p50_ms']:.0f} ms | {f['p99_ms']:.0f} ms "
            f"| {f['synapse_cpu_ms_per_msg']:.1f} ms | {f['bridge_cpu_ms_per_msg']:.1f} ms |"
        )
    return 0


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--rounds", type=int, default=3)
    return asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(cli())
