"""Scale of one bridge: N channels × 5 agents, plain and encrypted — start, RSS, idle CPU, TCP.

For N in 0 (the baseline, an empty store), 100, 300 and 1,000 (0, 100, 300 with --quick), in
plain and in encrypted rooms: the bridge in a process of its own (bridge_proc.py) against the
run's Synapse, five scripted agents configured, its store seeded directly (bench_store.fill_store:
the N channels, each agent a member of each with a session, 20 messages a channel, a finished
turn for each answer; encrypted: every room in `sk_e2ee_room` too). What a real start reads from
the store it reads from this one: the seeding only skips Synapse. What it does not cover: the
rooms do not exist in Synapse, so the agents' devices' first /sync (encrypted) carries no room
state for them — the figure for encrypted is the bridge's own part, not Synapse's.

Each store is started once first (encrypted: that start makes the six devices — login, keys,
cross-signing — and is shown apart), then REPS times; then, on the last start:
    start       open_store + Bridge() + start() until ready (bridge_proc.py's start_s)
    RSS         VmRSS of the bridge process after ready, and after the idle window
    idle CPU    utime + stime of the bridge process over IDLE seconds with nothing to do
    TCP         the bridge's established TCP connections (its socket inodes in /proc/net/tcp*)
    agents      processes the bridge started (its descendants): agents wait for their first
                prompt (slots, docs/architecture.md), so 0 is expected
then every channel is loaded as a portal (one appservice transaction of m.room.name events
from the owner, bench_start._touch_all) and RSS, idle CPU, TCP and agents are read again.
Idle CPU is counted in clock ticks (10 ms): 0.00 % over 30 s means under 0.03 %.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import aiohttp
import bench_start
import bench_store
from bridge_harness import agent, write_config
from common import Bench, median, start_bridge_proc, stop_by_stdin

from store import Store

AGENTS = tuple(f"a{i}" for i in range(5))
PER_CHANNEL = 20
TICK = os.sysconf("SC_CLK_TCK")


def seed(folder: Path, channels: int, encrypted: bool) -> None:
    store = Store.open("sqlite", folder)
    try:
        if channels:
            bench_store.fill_store(store, channels * PER_CHANNEL, channels, AGENTS, live=False)
        if encrypted and channels:
            with store.core.db.atomic():
                bench_store._insert(
                    store,
                    "sk_e2ee_room",
                    ("room_id", "marked"),
                    [(f"!bench{i}:localhost", 1) for i in range(channels)],
                )
    finally:
        store.close()


# ---- one process, from /proc ---------------------------------------------------------------------


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


async def idle_cpu(pid: int, seconds: float) -> float:
    """The process's CPU time over the next `seconds`, as a share of one core."""
    c0, t0 = cpu_s(pid), time.monotonic()
    await asyncio.sleep(seconds)
    c1, t1 = cpu_s(pid), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def tcp_connections(pid: int) -> dict:
    """The process's TCP sockets by state: established, listening, other."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    counts = {"established": 0, "listening": 0, "other": 0}
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[9] in inodes:
                state = {"01": "established", "0A": "listening"}.get(parts[3], "other")
                counts[state] += 1
    return counts


def descendants(pid: int) -> int:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = 0, {pid}
    while frontier:
        children = {p for p, parent in parents.items() if parent in frontier}
        found += len(children)
        frontier = children
    return found


# ---- the bridge ------------------------------------------------------------------------------------


async def measure(bench: Bench, folder: Path, channels: int, encrypted: bool, reps: int, idle_s: float) -> dict:
    kind = "encrypted" if encrypted else "plain"
    data = folder / f"{kind}-{channels}"
    await asyncio.to_thread(seed, data, channels, encrypted)
    config_path = write_config(
        bench,
        folder / f"cfg-{kind}-{channels}",
        {name: agent(title=name.upper()) for name in AGENTS},
        encryption="on" if encrypted else "off",
    )
    out: dict = {"channels": channels, "kind": kind, "starts": [], "process": [], "imports": [], "cpu": []}
    # the first start (encrypted: the devices made)
    proc, ready = await start_bridge_proc(config_path, data, timeout=300)
    out["first_s"] = ready["start_s"]
    await stop_by_stdin(proc, timeout=60)
    for rep in range(reps):
        proc, ready = await start_bridge_proc(config_path, data, timeout=300)
        try:
            out["starts"].append(ready["start_s"])
            out["process"].append(ready["process_s"])
            out["imports"].append(ready["import_s"])
            out["cpu"].append(ready["cpu_s"])
            if rep < reps - 1:
                continue
            pid = proc.pid
            out["rss_ready_kb"] = rss_kb(pid)
            await asyncio.sleep(2)  # what start left running settles (the first ping's answer…)
            out["idle_cpu"] = await idle_cpu(pid, idle_s)
            out["rss_idle_kb"] = rss_kb(pid)
            out["tcp"] = tcp_connections(pid)
            out["agents_running"] = descendants(pid)
            out["load"] = os.getloadavg()[0]
            if channels:  # every channel loaded as a portal, then idle again
                async with aiohttp.ClientSession() as http:
                    await bench_start._touch_all(bench, http, channels)
                await asyncio.sleep(2)
                out["loaded"] = {
                    "idle_cpu": await idle_cpu(pid, idle_s),
                    "rss_kb": rss_kb(pid),
                    "tcp": tcp_connections(pid),
                    "agents_running": descendants(pid),
                    "load": os.getloadavg()[0],
                }
        finally:
            await stop_by_stdin(proc, timeout=60)
    return out


async def run(bench: Bench, folder: Path) -> dict:
    sizes = (0, 100, 300) if bench.quick else (0, 100, 300, 1000)
    reps = 2 if bench.quick else 3
    idle_s = 10.0 if bench.quick else 30.0
    results = []
    for encrypted in (False, True):
        for channels in sizes:
            print(f"  {'encrypted' if encrypted else 'plain'}, {channels} channels …", flush=True)
            results.append(await measure(bench, folder, channels, encrypted, reps, idle_s))
    return {"results": results, "idle_s": idle_s, "reps": reps}


def rows(r: dict) -> list[tuple]:
    out = []
    by = {(x["kind"], x["channels"]): x for x in r["results"]}
    for (kind, channels), x in sorted(by.items(), key=lambda kv: (kv[0][0] != "plain", kv[0][1])):
        if channels == 0:
            continue
        base = by[(kind, 0)]
        start, base_start = median(x["starts"]), median(base["starts"])
        rss, base_rss = x["rss_idle_kb"] / 1024, base["rss_idle_kb"] / 1024
        tcp = x["tcp"]
        where = f"{kind}, {channels:,} channels × {len(AGENTS)} agents"
        out += [
            (
                "Scale",
                f"{where}: start to ready (median of {len(x['starts'])})",
                f"{start * 1000:.0f} ms",
                f"{base_start * 1000:.0f} ms (no channel)",
                f"{start / base_start:.2f}×",
                "≤ 2 s",
                start <= 2,
            ),
            (
                "Scale",
                f"{where}: RSS after {r['idle_s']:.0f} s idle (after ready)",
                f"{rss:.1f} MB ({x['rss_ready_kb'] / 1024:.1f})",
                f"{base_rss:.1f} MB",
                f"{rss / base_rss:.2f}×",
                "≤ 150 MB",
                rss <= 150,
            ),
            (
                "Scale",
                f"{where}: idle CPU over {r['idle_s']:.0f} s (load {x['load']:.1f})",
                f"{x['idle_cpu'] * 100:.2f} % of a core",
                f"{base['idle_cpu'] * 100:.2f} %",
                "",
                "≤ 1 %",
                x["idle_cpu"] <= 0.01,
            ),
            (
                "Scale",
                f"{where}: process start to ready, imports included; its CPU time (load {x['load']:.1f})",
                f"{median(x['process']) * 1000:.0f} ms ({median(x['imports']) * 1000:.0f} ms imports); "
                f"CPU {median(x['cpu']) * 1000:.0f} ms",
                f"{median(base['process']) * 1000:.0f} ms; CPU {median(base['cpu']) * 1000:.0f} ms",
                f"{median(x['cpu']) / median(base['cpu']):.2f}× CPU",
                "(info)",
                None,
            ),
            (
                "Scale",
                f"{where}: TCP connections established (listening); agents running",
                f"{tcp['established']} ({tcp['listening']}); {x['agents_running']}",
                f"{base['tcp']['established']} ({base['tcp']['listening']}); {base['agents_running']}",
                "",
                "(info)",
                None,
            ),
        ]
        loaded = x.get("loaded")
        if loaded:
            out.append(
                (
                    "Scale",
                    f"{where}, all {channels:,} loaded as portals: RSS; idle CPU; TCP; agents running",
                    f"{loaded['rss_kb'] / 1024:.1f} MB; {loaded['idle_cpu'] * 100:.2f} %; "
                    f"{loaded['tcp']['established']}; {loaded['agents_running']}",
                    f"{base_rss:.1f} MB; {base['idle_cpu'] * 100:.2f} % (no channel)",
                    f"{loaded['rss_kb'] / 1024 / base_rss:.2f}× RSS",
                    "≤ 150 MB, ≤ 1 %",
                    loaded["rss_kb"] / 1024 <= 150 and loaded["idle_cpu"] <= 0.01,
                )
            )
    return out


def notes(r: dict) -> list[str]:
    enc = [x for x in r["results"] if x["kind"] == "encrypted"]
    return [
        "scale: the first start of an encrypted store (its six devices made: login, keys, "
        "cross-signing) took " + ", ".join(f"{x['first_s'] * 1000:.0f} ms at {x['channels']:,}" for x in enc)
    ]
