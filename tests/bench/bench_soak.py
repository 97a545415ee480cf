"""Soak: 100,000 owner messages over 1,000 channels (10,000 with --quick), answered by the bridge;
does anything grow that should not?

History grows by design: every message is kept. Everything else must stop growing once the
transaction-key horizon is reached: the processed transaction keys (pruned by age; the horizon
is shortened to KEEP_S seconds here so that a run of minutes reaches it, where a bridge keeps
them 7 days), the rest of the bookkeeping (pending work, members, values) and the bridge's RSS.

Why a stub homeserver: at Synapse's pace (~15 answers/s on this machine, bench_throughput) the
soak would take two hours; the stub answers every client-server call at once (an event id for
each send, the start-up ping called back), so the run is bound by the bridge itself. The bridge
is the real one, in a process of its own (soak_proc.py), with ten scripted echo agents (a
channel each, 100 channels per agent). Owner messages arrive as appservice transactions of 10
events on the bridge's listener with the hs_token, round robin over the channels, as fast as
the bridge answers (at most MAX_WAITING unanswered).

Figures at the horizon and at the end: transaction keys stored, the store's bytes per table
group (SQLite dbstat: history, transaction keys, the rest), RSS. "Stopped growing" = end / at
the horizon for what must be bounded; history's bytes per message for what grows.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web
from bridge_harness import agent
from common import stop_by_stdin

from bridge.local.homeserver import free_port
from store import Store

HERE = Path(__file__).resolve().parent
CHANNELS, AGENTS, PER_TXN, MAX_WAITING = 1000, 10, 10, 30
HISTORY = ("sk_message", "sk_message_event")


class StubHomeserver:
    """Answers the bridge's client-server calls at once; calls the appservice back on ping."""

    def __init__(self, hs_token: str, as_url: str) -> None:
        self.hs_token, self.as_url = hs_token, as_url
        self.sends = 0
        self.kinds: dict[str, int] = {}  # requests by kind: message, edit, receipt, typing
        self.port = free_port()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(self.app, access_log=None)
        self._http: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._http = aiohttp.ClientSession()
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        await self._runner.cleanup()
        await self._http.close()

    async def handle(self, request: web.Request) -> web.Response:
        path = request.path
        await request.read()
        if path.endswith("/versions"):
            return web.json_response({"versions": ["v1.1", "v1.11"]})
        if "/send/" in path or path.endswith("/redact"):
            self.sends += 1
            try:
                body = await request.json()
            except ValueError:
                body = {}
            kind = "edit" if (body.get("m.relates_to") or {}).get("rel_type") == "m.replace" else "message"
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            return web.json_response({"event_id": f"${uuid.uuid4().hex}"})
        if "/receipt/" in path or "/typing/" in path:
            kind = "receipt" if "/receipt/" in path else "typing"
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if path.endswith("/register"):
            user = request.query.get("user_id") or "@x:localhost"
            return web.json_response({"user_id": user})
        if "/appservice/" in path and path.endswith("/ping"):
            async with self._http.post(
                f"{self.as_url}/_matrix/app/v1/ping", json={}, headers={"Authorization": f"Bearer {self.hs_token}"}
            ) as r:
                return web.json_response(
                    {"duration_ms": 1} if r.status == 200 else {"errcode": "M_UNKNOWN"},
                    status=200 if r.status == 200 else 502,
                )
        if path.endswith("/messages"):
            return web.json_response({"chunk": []})
        if "/join/" in path:
            return web.json_response({"room_id": path.rsplit("/", 1)[-1]})
        return web.json_response({})


def sizes(db_file: Path) -> dict:
    """Bytes of the store by table group (pages in use, indexes with their table) and keys kept."""
    with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=30) as db:
        owners = dict(db.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"))
        groups = {"history": 0, "txn": 0, "rest": 0}
        for name, size in db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            table = owners.get(name, name)
            groups["history" if table in HISTORY else "txn" if table == "sk_txn" else "rest"] += size
        groups["txn_rows"] = db.execute("SELECT count(*) FROM sk_txn").fetchone()[0]
        groups["messages"] = db.execute("SELECT count(*) FROM sk_message").fetchone()[0]
    groups["wal"] = (
        db_file.with_name(db_file.name + "-wal").stat().st_size
        if db_file.with_name(db_file.name + "-wal").exists()
        else 0
    )
    return groups


OWNER = "@owner:localhost"


async def run(folder: Path, quick: bool, session: aiohttp.ClientSession) -> dict:
    messages = int(os.environ.get("SIDEKICKS_SOAK_MESSAGES", 0)) or (10_000 if quick else 100_000)
    keep_s = 20 if quick else 60
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    as_port = free_port()
    base = {"owner": OWNER}
    # the bridge's config: the stub as its homeserver, ten echo agents, a registration of its own
    config_path = folder / "config.yaml"
    agents = {f"a{i}": agent(title=f"Agent {i}") for i in range(AGENTS)}
    config_path.write_text(
        yaml.safe_dump(
            {
                "owner": base["owner"],
                "homeserver": {"url": "http://127.0.0.1:1", "domain": "localhost"},
                "appservice": {
                    "listen": f"127.0.0.1:{as_port}",
                    "puppet_prefix": "sk_",
                    "bot": "sidekicks",
                    "registration": "registration.yaml",
                    "id": "soak",
                },
                "agents": agents,
                "limits": {"agents_in_memory": AGENTS},
                # plain rooms: the soak is about the store's growth; the stub cannot log a device in
                "encryption": False,
            },
            sort_keys=False,
        )
    )
    import config as configuration
    from config import registration as registrations

    cfg = configuration.load(config_path)
    hs_token = registrations.ensure(cfg, others=[]).hs_token
    stub = StubHomeserver(hs_token, f"http://127.0.0.1:{as_port}")
    await stub.start()
    text = config_path.read_text().replace("http://127.0.0.1:1", stub.url)
    config_path.write_text(text)

    def prefill() -> None:  # the channels exist already: the soak is about messages
        store = Store.open("sqlite", data)
        try:
            for i in range(CHANNELS):
                channel = store.create_channel(f"!soak{i}:localhost", f"channel {i}", f"a{i % AGENTS}")
                store.add_member(channel.id, f"a{i % AGENTS}")
        finally:
            store.close()

    await asyncio.to_thread(prefill)

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "soak_proc.py"),
        str(config_path),
        str(data),
        str(keep_s * 1000),
        "2000",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    out: dict = {"messages": messages, "keep_s": keep_s, "checkpoints": []}
    try:
        assert json.loads(await asyncio.wait_for(proc.stdout.readline(), 120))["ready"]

        async def stats() -> dict:
            proc.stdin.write(b"stats\n")
            await proc.stdin.drain()
            return json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))

        url = f"http://127.0.0.1:{as_port}/_matrix/app/v1/transactions/"
        headers = {"Authorization": f"Bearer {hs_token}"}
        started = time.monotonic()
        every = messages // 20
        horizon_at = None
        sent = 0
        while sent < messages:
            events = []
            for _ in range(PER_TXN):
                room = f"!soak{sent % CHANNELS}:localhost"
                events.append(
                    {
                        "type": "m.room.message",
                        "room_id": room,
                        "sender": base["owner"],
                        "event_id": f"$soak{sent}-{uuid.uuid4().hex[:8]}",
                        "origin_server_ts": int(time.time() * 1000),
                        "content": {"msgtype": "m.text", "body": f"soak message {sent}"},
                    }
                )
                sent += 1
            async with session.put(url + uuid.uuid4().hex, json={"events": events}, headers=headers) as r:
                assert r.status == 200, await r.text()
            if sent % 20 == 0:
                while (now := await stats())["prompts"] > MAX_WAITING:
                    await asyncio.sleep(0.05)
            if sent % every == 0:
                now = await stats()
                elapsed = time.monotonic() - started
                if horizon_at is None and elapsed >= keep_s + 2:
                    horizon_at = len(out["checkpoints"])
                out["checkpoints"].append({"sent": sent, "s": elapsed, **now, **sizes(data / "sidekicks.db")})
                print(f"  soak: {sent} sent, {elapsed:.0f} s, rss {now['rss_kb'] / 1024:.1f} MB", flush=True)
        while (last := await stats())["prompts"] or last["answers"]:
            await asyncio.sleep(0.1)
        out["elapsed"] = time.monotonic() - started
        out["final"] = {**last, **sizes(data / "sidekicks.db")}
        out["horizon_at"] = horizon_at
        out["sends"] = stub.sends
        out["kinds"] = dict(stub.kinds)
    finally:
        await stop_by_stdin(proc, timeout=60)
        await stub.stop()
    return out


def rows(r: dict) -> list[tuple]:
    cps = r["checkpoints"]
    n = r["messages"]
    at = r.get("horizon_at")
    if at is None or at >= len(cps):  # the run was shorter than the horizon: no plateau to show
        return [("Soak", f"{n:,} messages: the run ended before the {r['keep_s']} s horizon", "", "", "", "", False)]
    h, end = cps[at], r["final"]
    kb = 1024
    txn_ratio = end["txn"] / max(h["txn"], 1)
    rest_ratio = end["rest"] / max(h["rest"], 1)
    rss_ratio = end["rss_kb"] / max(h["rss_kb"], 1)
    half = cps[len(cps) // 2 - 1]
    half_ratio = end["rss_kb"] / max(half["rss_kb"], 1)
    history_per_msg_h = h["history"] / max(h["messages"], 1)
    history_per_msg = end["history"] / max(end["messages"], 1)
    label = f"at {h['sent']:,} messages ({h['s']:.0f} s, past the {r['keep_s']} s horizon)"
    return [
        (
            "Soak",
            f"{n:,} messages / {CHANNELS:,} channels: answered, in",
            f"{r['elapsed']:.0f} s",
            "",
            "",
            "(info)",
            None,
        ),
        (
            "Soak",
            "transaction keys stored (pruned by age)",
            f"{end['txn_rows']:,} ({end['txn'] / kb:.0f} KiB)",
            f"{h['txn_rows']:,} ({h['txn'] / kb:.0f} KiB) {label}",
            f"{txn_ratio:.2f}×",
            "≤ 1.25×",
            txn_ratio <= 1.25,
        ),
        (
            "Soak",
            "store bookkeeping besides history and keys (pending, members, …)",
            f"{end['rest'] / kb:.0f} KiB",
            f"{h['rest'] / kb:.0f} KiB {label}",
            f"{rest_ratio:.2f}×",
            "≤ 1.25×",
            rest_ratio <= 1.25,
        ),
        (
            "Soak",
            "bridge RSS",
            f"{end['rss_kb'] / kb:.1f} MB",
            f"{h['rss_kb'] / kb:.1f} MB {label}",
            f"{rss_ratio:.2f}×",
            "≤ 1.10×",
            rss_ratio <= 1.10,
        ),
        (
            "Soak",
            "bridge RSS, second half of the run",
            f"{end['rss_kb'] / kb:.1f} MB",
            f"{half['rss_kb'] / kb:.1f} MB at {half['sent']:,} messages",
            f"{half_ratio:.2f}×",
            "≤ 1.05×",
            half_ratio <= 1.05,
        ),
        (
            "Soak",
            "history (kept by design): bytes per message stored",
            f"{history_per_msg:.0f} B",
            f"{history_per_msg_h:.0f} B {label}",
            f"{history_per_msg / max(history_per_msg_h, 1):.2f}×",
            "(info)",
            None,
        ),
    ]


def notes(r: dict) -> list[str]:
    cps = r["checkpoints"]
    line = ", ".join(f"{c['sent'] // 1000}k: {c['txn_rows']} keys / {c['rss_kb'] / 1024:.0f} MB" for c in cps[::4])
    end = r.get("final", {})
    return [
        f"soak: {r['messages']:,} messages in transactions of {PER_TXN}, {AGENTS} echo agents, stub "
        f"homeserver ({r.get('sends', 0):,} sends; requests by kind {r.get('kinds', {})}); "
        f"keys kept {r['keep_s']} s (a bridge keeps 7 days), "
        f"pruned at most every 2 s; keys / RSS along the run: {line}; "
        f"{end.get('pruned', 0):,} keys pruned by the bridge; "
        f"WAL at the end {end.get('wal', 0) / 1024 / 1024:.1f} MiB"
    ]
