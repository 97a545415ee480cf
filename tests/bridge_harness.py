"""Running the real bridge against the session's Synapse, with scripted ACP agents.

    from bridge_harness import agent, start_bridge, answers_in

The bridge runs in the test's event loop (the same Bridge class `sidekicks run` uses) and
listens on the port the Synapse registration points at, so only one bridge at a time: the
`bridge_factory` fixture stops each bridge a test started.

Waiting for what a test names, never for a while:
- `running.handled(event_id)`: the bridge has handled the event and acknowledged its
  transaction (everything the event makes the bridge do at once is done; events are handled in
  order, so every earlier event too). What a stranger's event would have caused, had it got
  through, has happened by then.
- `running.idle()`: every owner message taken is answered and no answer is in progress (the
  store's pending records are empty), so no message of this bridge is still to come.
- At start, `start_bridge` sends a probe event as the bot and waits until the bridge receives
  it: every bridge of the run shares one Synapse and one registration, and a bridge a test
  stopped leaves Synapse backing off (2 s … 512 s) on that appservice. The bridge's start-up
  ping makes Synapse retry at once; the probe verifies it did, and that the transactions left
  from earlier tests (older than the probe) are delivered, before the test begins. Then it waits
  until Synapse has marked the appservice up again: an event written while the recovery that
  delivered the probe ends is stored unsent, and Synapse sends it only after its next failure
  (`appservice_up`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import yaml
from aiohttp import web

import config as configuration
from config import registration as registrations
from store import StoreUnavailable

SCRIPTED = Path(__file__).parent / "agents" / "scripted_agent.py"


def agent(*options: str, title: str | None = None, **extra: Any) -> dict:
    """An agents.<name> config entry running the scripted agent with `options`."""
    entry: dict[str, Any] = {"command": [sys.executable, str(SCRIPTED), *options]}
    if title:
        entry["title"] = title
    entry.update(extra)
    return entry


def write_config(hs, folder: Path, agents: dict[str, dict], **top: Any) -> Path:
    data = yaml.safe_load(hs.base_config_path.read_text())
    data["appservice"]["registration"] = str(hs.registration_path)
    # every agent runs in its sandbox (docs/sandbox.md); test agents write their logs and read
    # their scripts in the test's own folder (under the private /tmp each sandbox gets): it is
    # theirs to write, unless a test gives the agent a sandbox of its own. The bridge's config
    # and data folders inside it stay hidden.
    data["agents"] = {
        name: entry
        if not isinstance(entry, dict) or "sandbox" in entry
        else {**entry, "sandbox": {"write": [str(folder.parent)]}}
        for name, entry in agents.items()
    }
    # the owner of matrix_helpers.login has no end-to-end encryption: rooms the bridge makes stay
    # readable to it unless a test (tests/integration/test_e2ee.py) turns encryption on
    data["encryption"] = "off"
    data.update(top)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Deliveries:
    """Event ids of the transactions a bridge acknowledged (200), seen by an aiohttp middleware
    on its appservice listener: the homeserver's view of "handled"."""

    def __init__(self) -> None:
        self.event_ids: set[str] = set()
        self.when: dict[str, float] = {}  # event id → time.monotonic() of its acknowledgement
        self.times: Counter[str] = Counter()  # event id → transactions carrying it acknowledged
        self.transactions = 0
        self._news: asyncio.Event | None = None

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self._middleware)

    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        response = await handler(request)
        if request.method == "PUT" and "/transactions/" in request.path and response.status == 200:
            try:
                body = json.loads(await request.read())  # aiohttp keeps the body it read
            except ValueError:
                body = {}
            events = body.get("events") if isinstance(body, dict) else None
            for event in events if isinstance(events, list) else []:
                if isinstance(event, dict) and isinstance(event.get("event_id"), str):
                    self.event_ids.add(event["event_id"])
                    self.when.setdefault(event["event_id"], time.monotonic())
                    self.times[event["event_id"]] += 1
            self.transactions += 1
            if self._news is not None:
                self._news.set()
        return response

    async def wait(self, event_id: str, timeout: float = 60) -> None:
        """Until `event_id` is acknowledged. Gives up after `timeout` s without a transaction
        acknowledged, or 5 × `timeout` s in all: a homeserver handing on a backlog (the events of
        earlier tests, queued while no bridge listened) is slow on a loaded machine, not stuck."""
        start = time.monotonic()
        seen, deadline = self.transactions, start + timeout
        while event_id not in self.event_ids:
            if self.transactions != seen:
                seen, deadline = self.transactions, min(time.monotonic() + timeout, start + 5 * timeout)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"the bridge was not delivered {event_id} within "
                    f"{time.monotonic() - start:.0f} s ({self.transactions} transactions "
                    f"acknowledged; given up after {timeout:g} s without one, or {5 * timeout:g} s in all)"
                )
            self._news = asyncio.Event()
            try:
                await asyncio.wait_for(self._news.wait(), min(remaining, 1.0))
            except TimeoutError:
                pass


async def wait_until(predicate, timeout: float = 60, what: str | None = None, every: float = 0.05) -> None:
    """Poll `predicate()` (may be async) until it is true; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            name = what or getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(f"{name} still false after {timeout:g} s")
        await asyncio.sleep(every)


class RunningBridge:
    def __init__(self, bridge, cfg, deliveries: Deliveries | None = None):
        self.bridge = bridge
        self.config = cfg
        self.stopped = False
        self.deliveries = deliveries or Deliveries()

    @property
    def store(self):
        return self.bridge.store

    async def handled(self, event_id: str, timeout: float = 60) -> None:
        """Until the bridge has handled `event_id` and acknowledged its transaction."""
        await self.deliveries.wait(event_id, timeout)

    def is_idle(self) -> bool:
        try:
            return not self.store.turns.unfinished()
        except StoreUnavailable:  # the database is not back yet (reconnecting): not known idle
            return False

    async def idle(self, timeout: float = 60) -> None:
        """Until every turn is over: no owner message waits for an answer, none is being written."""
        await wait_until(self.is_idle, timeout, "the bridge is idle (no turn unfinished)")

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.bridge.stop()


async def start_bridge(
    hs, folder: Path, agents: dict[str, dict], data_dir: Path | None = None, probe: bool = True, **top: Any
) -> RunningBridge:
    """Start the real Bridge in this loop. With `probe` (the default), return only once the
    homeserver delivers to it (see the module's docstring); a test about that very delivery
    (the start-up ping) passes probe=False."""
    from bridge.bridge import Bridge
    from bridge.cli import open_store

    path = write_config(hs, folder, agents, **top)
    cfg = configuration.load(path)
    cfg = dataclasses.replace(cfg, data_dir=data_dir or folder / "data")
    registration = registrations.read(cfg.registration_path)
    store, unavailable = open_store(cfg)
    bridge = Bridge(cfg, registration, store, history_unavailable=unavailable)
    deliveries = Deliveries()
    deliveries.install(bridge.server.app)
    await bridge.start()
    running = RunningBridge(bridge, cfg, deliveries)
    if probe:
        try:
            await probe_delivery(hs.url, registration.as_token, running)
            await appservice_up(hs, registration.id)
        except BaseException:
            await running.stop()
            raise
    return running


_probe_rooms: dict[tuple[str, str], str] = {}


async def appservice_up(hs, as_id: str, timeout: float = 60) -> None:
    """Wait until the SQLite Synapse of `hs` no longer marks appservice `as_id` down.

    Synapse's recovery sends the transactions it kept, then marks the appservice up; an event
    written in between is stored as a transaction while it is still down, and no one sends it
    until the appservice's next failure (a test's first invite would wait forever). Synapse
    on PostgreSQL (the workers' tests): not looked at."""
    server = getattr(hs, "server", None)
    path = getattr(server, "folder", None)
    path = path / "homeserver.db" if isinstance(path, Path) else None
    if path is None or not path.exists():
        return

    def state() -> str | None:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            row = db.execute("SELECT state FROM application_services_state WHERE as_id = ?", (as_id,)).fetchone()
        finally:
            db.close()
        return row[0] if row else None

    deadline = time.monotonic() + timeout
    while await asyncio.to_thread(state) == "down":
        assert time.monotonic() < deadline, f"Synapse still marks the appservice down after {timeout:g} s"
        await asyncio.sleep(0.05)


REPROBE = 20.0  # seconds before another probe is sent (one may be left unsent, see below)


async def probe_delivery(hs_url: str, as_token: str, running: RunningBridge, timeout: float = 60) -> None:
    """The bot sends an event only the appservice cares about; wait until the bridge has it.

    Synapse can store a transaction unsent as the recovery that a start sets off ends, and send
    it only at its next failure (docs/reliability.md "Restarts", transaction order; a probe is no owner's
    message, which the bridge would read back): another probe goes out every REPROBE s, and any
    one delivered shows that the homeserver delivers to the new bridge."""
    headers = {"Authorization": f"Bearer {as_token}"}
    sent: list[str] = []
    deliveries = running.deliveries
    started = quiet_since = time.monotonic()
    seen = deliveries.transactions
    async with aiohttp.ClientSession(headers=headers) as http:
        room_id = _probe_rooms.get((hs_url, as_token))
        if room_id is None:  # one room per homeserver: the bot alone, no name, nothing to bridge
            async with http.post(f"{hs_url}/_matrix/client/v3/createRoom", json={"preset": "private_chat"}) as response:
                body = await response.json()
                assert response.status == 200, f"probe room not created: {response.status} {body}"
            room_id = _probe_rooms[(hs_url, as_token)] = body["room_id"]
        while True:
            txn = uuid.uuid4().hex
            url = f"{hs_url}/_matrix/client/v3/rooms/{quote(room_id, safe='')}/send/org.sidekicks.test.probe/{txn}"
            async with http.put(url, json={"probe": txn}) as response:
                body = await response.json()
                assert response.status == 200, f"probe not sent: {response.status} {body}"
            sent.append(body["event_id"])
            try:
                await wait_until(lambda: any(e in deliveries.event_ids for e in sent), REPROBE, "a probe delivered")
                return
            except AssertionError:
                pass
            # given up after `timeout` s without a transaction acknowledged, or 5 × in all (a
            # homeserver handing on a backlog is slow on a loaded machine, not stuck)
            now = time.monotonic()
            if deliveries.transactions != seen:
                seen, quiet_since = deliveries.transactions, now
            waited = now - started
            if now - quiet_since >= timeout or waited >= 5 * timeout:
                raise AssertionError(
                    f"the homeserver does not deliver to the new bridge (still backing off after an "
                    f"earlier test's bridge stopped?): none of {len(sent)} probes delivered within "
                    f"{waited:.0f} s ({deliveries.transactions} transactions acknowledged)"
                )


def answers_in(events: list[dict], sender: str) -> list[dict]:
    """`sender`'s messages with their edits applied: [{event_id, body, html, edits}], oldest first."""
    messages: dict[str, dict] = {}
    order: list[str] = []
    for event in events:
        if event.get("type") != "m.room.message" or event.get("sender") != sender:
            continue
        content = event.get("content") or {}
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace" and "m.new_content" in content:
            target = messages.get(relates.get("event_id"))
            if target is not None:
                new = content["m.new_content"]
                target.update(body=new.get("body", ""), html=new.get("formatted_body"))
                target["edits"] += 1
                target["history"].append(new.get("body", ""))
            continue
        messages[event["event_id"]] = {
            "event_id": event["event_id"],
            "body": content.get("body", ""),
            "html": content.get("formatted_body"),
            "edits": 0,
            "msgtype": content.get("msgtype"),
            "history": [content.get("body", "")],
        }
        order.append(event["event_id"])
    return [messages[event_id] for event_id in order]
