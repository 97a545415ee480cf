"""Helpers for tests that talk to the real Synapse of the `homeserver` fixture (tests/conftest.py).

Import them as `from matrix_helpers import login, sync_until, events_in, texts_in` (pytest puts
tests/ on sys.path because tests/ is not a package).

A typical end-to-end test:

    async def test_owner_talks_to_alice(homeserver):
        owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
        try:
            room = (await owner.room_create(name="t")).room_id
            await owner.room_send(room, "m.room.message", {"msgtype": "m.text", "body": "hi"})
            await sync_until(owner, lambda: any(e["sender"] == "@sk_alice:localhost"
                                                for e in events_in(owner, room)))
        finally:
            await owner.close()

Every client made by `login` records every timeline event it receives through `sync`, so
`events_in` sees everything since the client's first sync, whichever helper ran the sync.
The fixture's Synapse lives for the whole session: use fresh rooms in each test rather than
counting on a clean server.

Never wait a while for something *not* to happen: wait for a condition that shows it could
have happened and did not. `caught_up(client, room_id)` makes the client see every event the
room had when it was called (it sends a marker event nobody acts on and syncs until it is
back); bridge_harness's `running.handled(event_id)` and `running.idle()` say when the bridge has
done what an event could make it do. Timeouts are generous (PATIENCE): a busy machine is slow,
not wrong, and a condition that holds returns at once.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import random
import secrets
import socket
import time
import weakref
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nio
import yaml

import config
import config.registration
from bridge.local.homeserver import Homeserver, HomeserverError, free_port

FIGURES: list[tuple[str, dict]] = []

# seconds a wait for a condition allows by default: long enough for a loaded 2-core machine
# (several suites at once), and no cost when the condition comes quickly
PATIENCE = 120
MARKER = "org.sidekicks.test.marker"


def record_figures(name: str, figures: dict) -> None:
    """Show `figures` in the run's summary (tests/conftest.py prints them, also with -q)."""
    FIGURES.append((name, figures))


def write_base_config(folder: Path, hs_port: int, as_port: int) -> config.Config:
    """`folder/base.yaml` (owner @owner:localhost, bridge on `as_port`) and its registration."""
    base = folder / "base.yaml"
    base.write_text(
        yaml.safe_dump(
            {
                "owner": "@owner:localhost",
                "homeserver": {"url": f"http://127.0.0.1:{hs_port}", "domain": "localhost"},
                "appservice": {
                    "listen": f"127.0.0.1:{as_port}",
                    "puppet_prefix": "sk_",
                    "bot": "sidekicks",
                    "registration": "registration.yaml",
                },
            },
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    cfg = config.load(base)
    config.registration.ensure(cfg)
    return cfg


# Ports of the test homeservers and their bridges: a block of its own for each pytest-xdist worker
# (gw0, gw1, …), below the kernel's ephemeral range (32768+), so no two workers pick the same port
# and no outgoing connection holds one a server is about to listen on.
PORT_BLOCK = 600
# each process walks its block from a place of its own: two test runs side by side on one
# machine (their workers share names, gw0, gw1 …) do not try the same ports in the same order
_ports = itertools.count(random.randrange(PORT_BLOCK))


def worker_index() -> int:
    """This pytest-xdist worker's number (gw2 → 2), 0 without workers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def worker_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, from this worker's own block."""
    base = 21000 + PORT_BLOCK * (worker_index() % 13)
    for _ in range(PORT_BLOCK):
        port = base + next(_ports) % PORT_BLOCK
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return free_port()  # the whole block busy: let the kernel choose


class SynapseOnPostgres(Homeserver):
    """The project's Synapse with its database on a PostgreSQL server (`dsn`: psycopg2's
    connection arguments), as deploy/compose.yaml runs it."""

    def __init__(self, *args, dsn: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.dsn = dsn

    def _config(self, kept, log_config):
        body = super()._config(kept, log_config)
        body["database"] = {"name": "psycopg2", "args": {**self.dsn, "cp_min": 1, "cp_max": 5}}
        return body


@asynccontextmanager
async def private_homeserver(folder: Path, postgres: dict | None = None):
    """Start a Synapse of its own in `folder` (what the session fixture `homeserver` uses too):
    base.yaml + registration.yaml for a bridge on a free port, users owner and stranger. Its
    database is SQLite in `folder`, or with `postgres` (psycopg2's connection arguments, a
    database made with C collation) on that PostgreSQL server."""
    folder.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        hs_port, as_port = worker_port(), worker_port()
        cfg = write_base_config(folder, hs_port, as_port)
        options: dict[str, Any] = dict(
            port=hs_port,
            appservice_files=[cfg.registration_path],
            relaxed_limits=True,
            encryption=False,  # the well-known file of `encryption: off`
        )
        if postgres is None:
            server = Homeserver(folder / "synapse", server_name="localhost", **options)
        else:
            server = SynapseOnPostgres(folder / "synapse", server_name="localhost", dsn=postgres, **options)
        try:
            await server.start()
            break
        except HomeserverError as exc:
            # another process took the port between the check and Synapse's listen (a second
            # test run on the same machine): another port, at most three times
            if "Failed to listen" not in str(exc) or attempt == 2:
                raise
    try:
        owner_password = secrets.token_urlsafe(16)
        stranger_password = secrets.token_urlsafe(16)
        owner_id = await server.register_user("owner", owner_password)
        stranger_id = await server.register_user("stranger", stranger_password)
        yield TestHomeserver(
            url=server.url,
            domain="localhost",
            as_port=as_port,
            registration_path=cfg.registration_path,
            owner_id=owner_id,
            owner_password=owner_password,
            stranger_id=stranger_id,
            stranger_password=stranger_password,
            folder=folder,
            server=server,
        )
    finally:
        await server.stop()


@dataclass
class TestHomeserver:
    """What the session fixture `homeserver` yields."""

    __test__ = False  # a dataclass named Test*, not a test class: pytest must not collect it

    url: str  # http://127.0.0.1:<port> of Synapse
    domain: str  # "localhost" (the server name)
    as_port: int  # where Synapse expects the bridge's appservice listener
    registration_path: Path  # appservice registration Synapse loaded (as_token, hs_token)
    owner_id: str  # "@owner:localhost", the owner in base.yaml
    owner_password: str
    stranger_id: str  # "@stranger:localhost", a user who is not the owner
    stranger_password: str
    folder: Path  # the session's temp folder: base.yaml, registration.yaml, synapse/
    server: Homeserver  # the running server (register more users with server.register_user)

    @property
    def base_config_path(self) -> Path:
        """The bridge config the registration was made from (owner, domain, listener, no agents)."""
        return self.folder / "base.yaml"


# Per-client record of timeline events: client -> room id -> raw events, in arrival order.
_events: weakref.WeakKeyDictionary[nio.AsyncClient, dict[str, list[dict]]] = weakref.WeakKeyDictionary()
_store_numbers = itertools.count()


def _record(client: nio.AsyncClient) -> dict[str, list[dict]]:
    """Start recording `client`'s timeline events (once per client) and return the record."""
    if client in _events:
        return _events[client]
    rooms: dict[str, list[dict]] = {}
    seen: set[str] = set()

    def on_event(room: nio.MatrixRoom, event: Any) -> None:
        # nio calls this for each timeline event of a joined room, including events it could
        # not parse (BadEvent): the raw dict is in `source` either way.
        source = getattr(event, "source", None)
        if not isinstance(source, dict):
            return
        event_id = source.get("event_id")
        if event_id in seen:
            return  # a later sync may repeat an event
        seen.add(event_id)
        rooms.setdefault(room.room_id, []).append(source)

    client.add_event_callback(on_event, (nio.Event, nio.BadEvent, nio.UnknownBadEvent))
    _events[client] = rooms
    return rooms


async def login(
    hs: TestHomeserver, user_id: str, password: str, device_name: str = "tests", encryption: bool = False
) -> nio.AsyncClient:
    """A matrix-nio client logged in as `user_id`, already recording events. Close it yourself.

    Without `encryption` (the default) the client encrypts nothing: a test that needs an
    encrypted room can send an m.room.encryption state event by hand. With it, the client has
    a device of its own with its keys uploaded (tests/integration/test_e2ee.py `e2e_login`).

    Raises AssertionError (with the server's answer) when the login is refused.
    """
    store = hs.folder / "nio" / f"{user_id.strip('@').replace(':', '_')}-{next(_store_numbers)}"
    store.mkdir(parents=True, exist_ok=True)
    client = nio.AsyncClient(
        hs.url,
        user_id,
        store_path=str(store),
        config=nio.AsyncClientConfig(encryption_enabled=encryption, request_timeout=30, max_timeouts=3),
    )
    response = await client.login(password, device_name=device_name)
    if not isinstance(response, nio.LoginResponse):
        await client.close()
        raise AssertionError(f"login of {user_id} refused: {response}")
    if encryption and client.should_upload_keys:
        assert isinstance(await client.keys_upload(), nio.KeysUploadResponse)
    _record(client)
    return client


@asynccontextmanager
async def logged_in(hs: TestHomeserver, user_id: str, password: str, **options):
    """`async with logged_in(hs, user, password) as client`: `login(…)`, closed at the end
    whatever happens."""
    client = await login(hs, user_id, password, **options)
    try:
        yield client
    finally:
        await client.close()


# A sync returns at most this many events of a room: Synapse's default is 10, and a sync past it
# is `limited` — the older events of that stretch are never seen (a burst of edits after a restart)
WHOLE_TIMELINE = {"room": {"timeline": {"limit": 1000}}}


async def sync_until(
    client: nio.AsyncClient, predicate: Callable[[], bool | Awaitable[bool]], timeout: float = PATIENCE
) -> None:
    """Sync `client` again and again until `predicate()` is true.

    `predicate` takes no arguments and may be async; it is checked before the first sync and
    after each one, so it can look at `events_in(...)`, `client.rooms`, `client.invited_rooms`
    or anything else (a store, a fake agent's log). Each sync waits at most 1 s for news, so a
    predicate about something outside Matrix is rechecked at least once a second.

    Raises AssertionError after `timeout` seconds, naming the predicate and showing the last
    events the client saw in each room.
    """

    async def holds() -> bool:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        return bool(result)

    _record(client)
    deadline = time.monotonic() + timeout
    while True:
        if await holds():
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        response = await client.sync(timeout=int(min(remaining, 1.0) * 1000), sync_filter=WHOLE_TIMELINE)
        if not isinstance(response, nio.SyncResponse):
            await asyncio.sleep(0.2)  # a transient error (server busy): try again until the deadline
    name = getattr(predicate, "__qualname__", repr(predicate))
    raise AssertionError(
        f"sync_until: {name} still false after {timeout:g} s for {client.user_id}\n" + _describe(client)
    )


async def caught_up(client: nio.AsyncClient, room_id: str, timeout: float = PATIENCE) -> None:
    """Until `client` has seen every event `room_id` held when this was called: a marker event
    (a type no bridge acts on) is sent, and the client syncs until it comes back."""
    response = await client.room_send(room_id, MARKER, {"marker": secrets.token_hex(8)})
    assert isinstance(response, nio.RoomSendResponse), response
    marker = response.event_id

    def marker_seen() -> bool:
        return any(event.get("event_id") == marker for event in events_in(client, room_id))

    marker_seen.__qualname__ = f"marker {marker} seen"
    await sync_until(client, marker_seen, timeout=timeout)


def events_in(client: nio.AsyncClient, room_id: str) -> list[dict[str, Any]]:
    """Timeline events `client` has received in `room_id` so far, oldest first.

    Only rooms the client is joined to have a timeline; an invite shows up in
    `client.invited_rooms` instead (join with `client.join(room_id)`).

    Each item is the raw event dict from the homeserver: `event_id`, `sender`, `type`,
    `content`, `origin_server_ts`, plus `state_key` for state events and `unsigned`. The list
    is live (it grows as the client syncs); copy it to keep a snapshot.
    """
    return _record(client).setdefault(room_id, [])


def texts_in(client: nio.AsyncClient, room_id: str, sender: str | None = None) -> list[str]:
    """Bodies of the m.room.message events in `room_id` (optionally only from `sender`)."""
    return [
        event["content"].get("body", "")
        for event in events_in(client, room_id)
        if event.get("type") == "m.room.message"
        and isinstance(event.get("content"), dict)
        and (sender is None or event.get("sender") == sender)
    ]


def notice_events(client: nio.AsyncClient, room_id: str, sender: str | None = None) -> list[dict[str, Any]]:
    """The m.notice messages (the bridge's notices) of `events_in(client, room_id)`, optionally
    only those from `sender`: raw events, oldest first."""
    return [
        event
        for event in events_in(client, room_id)
        if event.get("type") == "m.room.message"
        and isinstance(event.get("content"), dict)
        and event["content"].get("msgtype") == "m.notice"
        and (sender is None or event.get("sender") == sender)
    ]


def notices(client: nio.AsyncClient, room_id: str, sender: str | None = None) -> list[str]:
    """The bodies of `notice_events(client, room_id, sender)`."""
    return [event["content"].get("body", "") for event in notice_events(client, room_id, sender)]


def joined(client: nio.AsyncClient, room_id: str, user_id: str) -> bool:
    """`user_id`'s last membership in `room_id`, as `client` has seen it, is join."""
    state = [
        e for e in events_in(client, room_id) if e.get("type") == "m.room.member" and e.get("state_key") == user_id
    ]
    return bool(state) and state[-1]["content"].get("membership") == "join"


async def wait_joined(client: nio.AsyncClient, room_id: str, *user_ids: str) -> None:
    """Sync `client` until it sees each of `user_ids` joined to `room_id`."""

    def all_joined() -> bool:
        return all(joined(client, room_id, user_id) for user_id in user_ids)

    all_joined.__qualname__ = f"{', '.join(user_ids)} joined {room_id}"
    await sync_until(client, all_joined)


async def open_dm(owner: nio.AsyncClient, puppet_id: str = "@sk_alice:localhost", **options) -> str:
    """A new direct room with `puppet_id`, once the puppet has joined it (`options`: more of
    room_create's arguments, e.g. initial_state)."""
    response = await owner.room_create(
        is_direct=True, invite=[puppet_id], preset=nio.RoomPreset.trusted_private_chat, **options
    )
    assert isinstance(response, nio.RoomCreateResponse), response
    await wait_joined(owner, response.room_id, puppet_id)
    return response.room_id


def _describe(client: nio.AsyncClient, last: int = 6) -> str:
    rooms = _events.get(client) or {}
    if not rooms:
        return "  (no timeline events seen)"
    lines = []
    for room_id, events in rooms.items():
        lines.append(f"  {room_id}: {len(events)} events, last:")
        for event in events[-last:]:
            content = event.get("content") or {}
            detail = content.get("body") or content.get("membership") or ""
            lines.append(f"    {event.get('sender')} {event.get('type')} {str(detail)[:120]!r}")
    return "\n".join(lines)
