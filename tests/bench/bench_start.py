"""Bridge start with 1M messages stored, and the bridge's RSS with 1,000 channels and 1M messages.

Each bridge runs in a process of its own (bridge_proc.py) against the run's Synapse, its store
filled beforehand (bench_store.fill): empty store (baseline) and 1,000 channels × 1,000 messages,
started alternately. RSS is the bridge process only: no agent is started. After start, all
1,000 channels are loaded as portals by one appservice transaction of m.room.name events from
the owner (straight to the bridge's listener, with the hs_token), and RSS is read again.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import aiohttp
import bench_store
from bridge_harness import agent, write_config
from common import Bench, median, start_bridge_proc, stop_by_stdin

from config import registration as registrations


async def _ask_rss(proc) -> dict:
    proc.stdin.write(b"rss\n")
    await proc.stdin.drain()
    return json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))


async def _touch_all(bench: Bench, http: aiohttp.ClientSession, channels: int) -> None:
    hs_token = registrations.read(bench.registration_path).hs_token
    for lo in range(0, channels, 250):
        events = [
            {
                "type": "m.room.name",
                "room_id": f"!bench{i}:localhost",
                "sender": bench.owner_id,
                "event_id": f"$name{i}-{uuid.uuid4().hex}",
                "state_key": "",
                "content": {"name": f"channel {i}"},
            }
            for i in range(lo, min(channels, lo + 250))
        ]
        async with http.put(
            f"http://127.0.0.1:{bench.as_port}/_matrix/app/v1/transactions/{uuid.uuid4().hex}",
            json={"events": events},
            headers={"Authorization": f"Bearer {hs_token}"},
        ) as r:
            assert r.status == 200, await r.text()


async def run(bench: Bench, http: aiohttp.ClientSession, folder: Path) -> dict:
    size = 100_000 if bench.quick else 1_000_000
    config_path = write_config(bench, folder / "cfg", {"echo": agent(title="Echo")})
    empty, full = folder / "empty", folder / "full"
    empty.mkdir(parents=True)
    await asyncio.to_thread(bench_store.fill, full, size)
    out = {"size": size, "empty": [], "full": [], "import": [], "rss": {}}
    reps = 3
    for rep in range(reps):
        for kind, data_dir in (("empty", empty), ("full", full)):
            proc, ready = await start_bridge_proc(config_path, data_dir)
            try:
                out[kind].append(ready["start_s"])
                out["import"].append(ready["import_s"])
                if rep == reps - 1:
                    after_start = await _ask_rss(proc)
                    if kind == "full":
                        await _touch_all(bench, http, bench_store.CHANNELS)
                        loaded = await _ask_rss(proc)
                    else:
                        loaded = after_start
                    out["rss"][kind] = (after_start["rss_kb"], loaded["rss_kb"], loaded["portals"])
            finally:
                await stop_by_stdin(proc)
    return out


def _n(size: int) -> str:
    return f"{size // 1_000_000}M" if size >= 1_000_000 else f"{size // 1000}k"


def rows(r: dict) -> list[tuple]:
    n = _n(r["size"])
    full, empty = median(r["full"]), median(r["empty"])
    rss_empty = r["rss"]["empty"][0] / 1024
    rss_start, rss_loaded, portals = r["rss"]["full"]
    rss_start, rss_loaded = rss_start / 1024, rss_loaded / 1024
    goal_size = r["size"] >= 1_000_000
    total = median([a + b for a, b in zip(r["import"][1::2], r["full"])])
    return [
        ("Start", f"process → ready (imports + start), {n} messages", f"{total * 1000:.0f} ms", "", "", "(info)", None),
        (
            "Start",
            f"bridge start, {n} messages stored (median of {len(r['full'])})",
            f"{full * 1000:.0f} ms",
            f"{empty * 1000:.0f} ms (empty store)",
            f"{full / empty:.2f}×",
            "≤ 1 s" + ("" if goal_size else " (at 1M)"),
            full <= 1 if goal_size else None,
        ),
        (
            "RSS",
            f"bridge RSS, 1,000 channels / {n} messages, after start",
            f"{rss_start:.1f} MB",
            f"{rss_empty:.1f} MB (empty store)",
            f"{rss_start / rss_empty:.2f}×",
            "≤ 80 MB",
            rss_start <= 80 if goal_size else None,
        ),
        (
            "RSS",
            f"bridge RSS, same, {portals} channels loaded as portals",
            f"{rss_loaded:.1f} MB",
            f"{rss_empty:.1f} MB (empty store)",
            f"{rss_loaded / rss_empty:.2f}×",
            "≤ 80 MB",
            rss_loaded <= 80 if goal_size else None,
        ),
    ]


def notes(r: dict) -> list[str]:
    return [
        f"bridge start = open_store + Bridge() + start() until ready (homeserver reachable, "
        f"bot and puppet registered, ping); Python imports before it take "
        f"{median(r['import']) * 1000:.0f} ms more (median)."
    ]
