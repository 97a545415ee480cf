"""What every benchmark shares: one Synapse with two appservices, the owner's raw client, stats.

The owner is driven with bare aiohttp (no matrix-nio): a long-polling /sync task stamps each
timeline event with time.perf_counter() the moment the response is parsed, so the client side
costs the same for the floor and for the bridge.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT, ROOT / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from matrix_helpers import write_base_config  # noqa: E402

from bridge.local.homeserver import Homeserver, free_port  # noqa: E402

now = time.perf_counter


def q(value: str) -> str:
    return quote(value, safe="")


# ---- statistics -------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def p50(values):
    return pct(values, 50)


def p99(values):
    return pct(values, 99)


def median(values):
    return statistics.median(values) if values else float("nan")


# ---- the homeserver ---------------------------------------------------------------------------


@dataclass
class Bench:
    """One Synapse for the whole run, with the bridge's and the floor's registrations."""

    folder: Path
    server: Homeserver
    base_config: Path
    registration_path: Path
    as_port: int
    floor_registration: dict
    floor_port: int
    owner_id: str
    owner_password: str
    quick: bool
    results: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.server.url

    # harness compatibility (bridge_harness.write_config reads these)
    @property
    def base_config_path(self) -> Path:
        return self.base_config


FLOOR_BOT = "echofloor"


async def start_homeserver(folder: Path, quick: bool) -> Bench:
    folder.mkdir(parents=True, exist_ok=True)
    hs_port, as_port, floor_port = free_port(), free_port(), free_port()
    while len({hs_port, as_port, floor_port}) < 3:
        as_port, floor_port = free_port(), free_port()
    cfg = write_base_config(folder, hs_port, as_port)
    base = folder / "base.yaml"
    floor = {
        "id": "echo-floor",
        "url": f"http://127.0.0.1:{floor_port}",
        "as_token": secrets.token_urlsafe(32),
        "hs_token": secrets.token_urlsafe(32),
        "sender_localpart": FLOOR_BOT,
        "namespaces": {"users": [{"exclusive": True, "regex": "@echofloor_.*:localhost"}], "aliases": [], "rooms": []},
        # what the bridge's registration asks for too (config/registration.py): ephemeral events
        # and the MSC3202 transaction extensions. Synapse's work for them (one-time-key counts,
        # device lists) delays every transaction to the service by 4-8 ms; a floor that asks for
        # neither measured the bridge at 1.17-1.25x instead of 1.18x (docs/performance.md)
        "rate_limited": False,
        "receive_ephemeral": True,
        "de.sorunome.msc2409.push_ephemeral": True,
        "org.matrix.msc3202": True,
    }
    floor_path = folder / "floor-registration.yaml"
    floor_path.write_text(yaml.safe_dump(floor, sort_keys=False), encoding="utf-8")
    server = Homeserver(
        folder / "synapse",
        server_name="localhost",
        port=hs_port,
        appservice_files=[cfg.registration_path, floor_path],
        relaxed_limits=True,
    )
    await server.start()
    password = secrets.token_urlsafe(16)
    owner_id = await server.register_user("owner", password)
    return Bench(
        folder=folder,
        server=server,
        base_config=base,
        registration_path=cfg.registration_path,
        as_port=as_port,
        floor_registration=floor,
        floor_port=floor_port,
        owner_id=owner_id,
        owner_password=password,
        quick=quick,
    )


# ---- offering load on time ---------------------------------------------------------------------


async def on_time(t0: float, total: int, rate: float) -> AsyncIterator[int]:
    """0 … total - 1, each when its turn comes at `rate` a second from `t0` (a late one at once)."""
    for i in range(total):
        delay = t0 + i / rate - now()
        if delay > 0:
            await asyncio.sleep(delay)
        yield i


# ---- a bridge in a process of its own ---------------------------------------------------------


async def start_bridge_proc(
    config_path: Path, data_dir: Path, timeout: float = 120
) -> tuple[asyncio.subprocess.Process, dict]:
    """bridge_proc.py on `config_path` with its store in `data_dir`, and its ready line (with
    "process_s": from spawning the process to ready). Raises if it ends before it is ready."""
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).resolve().parent / "bridge_proc.py"),
        str(config_path),
        str(data_dir),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        await proc.wait()
        raise RuntimeError(f"the bridge ended before it was ready (exit {proc.returncode})")
    ready = json.loads(line)
    ready["process_s"] = time.perf_counter() - t0
    return proc, ready


async def stop_by_stdin(proc: asyncio.subprocess.Process, timeout: float = 30) -> None:
    """Close its stdin (bridge_proc.py and soak_proc.py stop then) and wait for it; killed after
    `timeout` s."""
    if proc.stdin and not proc.stdin.is_closing():
        proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()


# ---- the owner's client -----------------------------------------------------------------------

SYNC_FILTER = json.dumps(
    {
        "presence": {"types": []},
        "account_data": {"types": []},
        "room": {
            "ephemeral": {"types": []},
            "account_data": {"types": []},
            "state": {"lazy_load_members": True},
            "timeline": {"types": ["m.room.message", "m.room.member"], "limit": 500},
        },
    }
)


class Owner:
    """The owner, as a bare HTTP client with a sync task recording every timeline event."""

    def __init__(self, hs_url: str, session: aiohttp.ClientSession):
        self.hs = hs_url
        self.http = session
        self.token = ""
        self.user_id = ""
        self.since: str | None = None
        self.events: dict[str, list[tuple[float, dict]]] = {}  # room -> [(seen_at, event)]
        self.invites: set[str] = set()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task | None = None
        self._txn = 0

    async def login(self, user_id: str, password: str) -> None:
        body = {"type": "m.login.password", "identifier": {"type": "m.id.user", "user": user_id}, "password": password}
        async with self.http.post(f"{self.hs}/_matrix/client/v3/login", json=body) as r:
            data = await r.json()
        self.token, self.user_id = data["access_token"], data["user_id"]

    def _h(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    async def request(self, method: str, path: str, body: Any = None) -> dict:
        async with self.http.request(method, self.hs + path, json=body, headers=self._h()) as r:
            data = await r.json(content_type=None)
            if r.status != 200:
                raise RuntimeError(f"{method} {path}: {r.status} {data}")
            return data

    async def send_text(self, room_id: str, text: str) -> str:
        self._txn += 1
        path = f"/_matrix/client/v3/rooms/{q(room_id)}/send/m.room.message/b{self._txn}-{secrets.token_hex(4)}"
        return (await self.request("PUT", path, {"msgtype": "m.text", "body": text}))["event_id"]

    async def create_room(self, invite: list[str] | None = None, direct: bool = False, name: str | None = None) -> str:
        body: dict[str, Any] = {"preset": "trusted_private_chat", "invite": invite or [], "is_direct": direct}
        if name:
            body["name"] = name
        return (await self.request("POST", "/_matrix/client/v3/createRoom", body))["room_id"]

    def start_sync(self) -> None:
        self._task = asyncio.create_task(self._sync_loop())

    async def stop_sync(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _sync_loop(self) -> None:
        while True:
            params = {"timeout": "30000", "filter": SYNC_FILTER}
            if self.since:
                params["since"] = self.since
            else:
                params["timeout"] = "0"
            try:
                async with self.http.get(
                    f"{self.hs}/_matrix/client/v3/sync",
                    params=params,
                    headers=self._h(),
                    timeout=aiohttp.ClientTimeout(total=60),
                ) as r:
                    data = await r.json()
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.1)
                continue
            seen = now()
            self.since = data.get("next_batch", self.since)
            rooms = data.get("rooms") or {}
            for room_id, room in (rooms.get("join") or {}).items():
                record = self.events.setdefault(room_id, [])
                for event in (room.get("timeline") or {}).get("events") or []:
                    record.append((seen, event))
            self.invites.update((rooms.get("invite") or {}).keys())
            async with self._changed:
                self._changed.notify_all()

    async def wait_for(self, predicate, timeout: float = 30) -> Any:
        """Wait until predicate() returns something truthy (checked after every sync)."""
        deadline = now() + timeout
        async with self._changed:
            while True:
                found = predicate()
                if found:
                    return found
                left = deadline - now()
                if left <= 0:
                    raise TimeoutError(f"wait_for {getattr(predicate, '__name__', predicate)}")
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except TimeoutError:
                    pass

    async def wait_joined(self, room_id: str, user_id: str, timeout: float = 30) -> None:
        def joined():
            return any(
                e.get("type") == "m.room.member"
                and e.get("state_key") == user_id
                and (e.get("content") or {}).get("membership") == "join"
                for _, e in self.events.get(room_id, [])
            )

        await self.wait_for(joined, timeout)


def body_of(event: dict) -> str:
    content = event.get("content") or {}
    new = content.get("m.new_content")
    return (new or content).get("body", "") if isinstance(new or content, dict) else ""


STATUS_PREFIXES = ("⏳", "💭", "✍️", "🔧")


def is_final(body: str) -> bool:
    return not body.startswith(STATUS_PREFIXES) and body != "…"
