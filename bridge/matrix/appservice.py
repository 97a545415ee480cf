"""The application-service HTTP API the homeserver calls (Matrix AS API v1).

Every endpoint checks the hs_token in constant time and answers M_FORBIDDEN otherwise.
Transactions are idempotent: a transaction is recorded once all its events are handled, and the
same transaction sent again (also after a restart — the keys are in the store) is acknowledged
without handling it again; one the bridge could not handle in full is refused (HTTP 500) and
comes again (bridge/matrix/dispatch.py says which failures refuse it).
The key is the id *and* what it carries: Synapse on SQLite numbers
transactions from 1 again after a restart, so an id alone would drop new events.

Besides room events, a transaction may carry what end-to-end encryption needs (MSC2409 to-device
messages, MSC3202 device lists, one-time-key counts and unused fallback key types, under their
stable or unstable names): parsed into `DeviceTraffic` and handed on with the events.

Transactions are handled in the order they are numbered, where the homeserver numbers them
(`TransactionOrder`): one Synapse left behind comes before the ones it sent after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceTraffic:
    """The crypto side of a transaction, for the identities of this appservice."""

    to_device: list[dict] = field(default_factory=list)  # each with to_user_id / to_device_id
    changed: list[str] = field(default_factory=list)  # users whose devices changed
    left: list[str] = field(default_factory=list)  # users no longer sharing a room
    one_time_keys: dict[str, dict[str, dict[str, int]]] = field(
        default_factory=dict
    )  # user → device → algorithm → count
    fallback_keys: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # user → device → unused types

    def __bool__(self) -> bool:
        return bool(self.to_device or self.changed or self.left or self.one_time_keys or self.fallback_keys)


@dataclass(frozen=True)
class Transaction:
    txn_id: str
    events: list[dict]
    ephemeral: list[dict] = field(default_factory=list)
    device: DeviceTraffic = field(default_factory=DeviceTraffic)

    @property
    def key(self) -> str:
        return transaction_key(self.txn_id, self.events, self.device)

    @property
    def recorded(self) -> bool:
        """Whether the transaction itself is recorded as handled (`txn_seen` / `mark_txn`): only
        when it holds what has no key of its own — device traffic, and encrypted events (their
        decryption is not repeated). A room event the bridge acts on is de-duplicated by its own
        event id (the dispatcher), and receipts and typing the bridge acts on in no way: a
        transaction of those goes without a database round trip before and after it."""
        return bool(self.device) or any(e.get("type") == "m.room.encrypted" for e in self.events)


class TransactionOrder:
    """Keeps a homeserver's numbered transactions in their order.

    Synapse numbers transactions 1, 2, 3 … and sends them one at a time, oldest first — with one
    gap: when it recovers from a failed send, a transaction made in the instant between its
    recoverer finding nothing left to send and the service being marked up again is stored
    unsent, while the next ones go out at once. It would come only after the next failure —
    minutes or days later, an owner's message answered after the ones that followed it.

    But Synapse numbers the transactions of *all* its appservices from one sequence: with other
    appservices on the homeserver (other bridges, other people's Sidekicks) a skipped number is
    usually theirs, and holding every transaction after a gap back would delay messages again and
    again. A transaction is left behind only when Synapse recovers this appservice — after the
    bridge was away, or refused a transaction — and a refusal makes it recover: it then sends
    every unsent transaction of ours, oldest first. So the check is *armed* at start and after
    every refusal (`refused`); while armed, the first transaction after a gap is refused once
    (`on_gap` is told, to ask the homeserver to retry at once); what comes next is in order —
    the one left behind first if there was one, else the refused one again, which is let through
    — and the check is disarmed. A gap still open PATIENCE seconds after it was first seen is let
    through. Disarmed is not safe, only cheap: the refusal made Synapse recover again, and the
    end of that recovery can leave one behind in its turn (so can a recovery Synapse runs twice at
    once when pinged mid-way). So once a transaction was let through after a gap (`gap_at`: a gap
    after a transaction that came within RECOVERY of a start or a refusal — the gap's own refusal
    too —, while Synapse may have been recovering), each
    one is first handed to `on_gap_passed`, which reads back the rooms of the owners' messages in
    it that it has not read since that gap (bridge.py `_read_back_before`): an earlier message of
    the same room left behind is handled first, and skipped when its own transaction comes
    (matrix/left_behind.py).

    The last number handled (and since when a gap waits) is kept (`save`), so a gap across a
    restart of the bridge is seen too; a transaction acknowledged as seen counts as handled (a
    kill may have come between recording it and keeping its number). The number is
    written without holding the homeserver's answer back: a kill -9 can lose the last one, and
    the next start then refuses the homeserver's next transaction for a gap that is not there —
    once, and the bridge pings until it comes again (bridge.py `_retry_soon`). Holding every
    answer until the number was written kept the homeserver's next events in its memory longer
    (behind the database thread's queue), where a kill -9 of the homeserver loses them.
    """

    PATIENCE = 10.0  # seconds a gap may hold the next transactions back (Synapse retries in 2)
    # seconds after a start or a refusal in which Synapse may still be recovering this appservice:
    # a gap after a transaction that came then may hide one left behind (made as the recovery
    # ended). Other gaps are other appservices' numbers (other bridges on the homeserver): reading
    # rooms back for them would cost a request before every message on a shared homeserver
    RECOVERY = 60.0

    def __init__(
        self,
        load: Callable[[], str | None] = lambda: None,
        save: Callable[[str], None] = lambda value: None,
        clock: Callable[[], float] = time.time,
    ):
        self._save, self._clock = save, clock
        self.last: int | None = None
        self.armed = True  # a start: Synapse may be recovering this appservice
        self._refused: str | None = None  # the transaction refused for a gap, once
        self._gap_since: float | None = None
        self.gap_at: float | None = None  # when a transaction was last let through after a gap
        self._armed_at = clock()  # the last start or refusal: Synapse recovers after it
        self._last_at: float | None = None  # when `last` was handled (by this run)
        try:
            kept = json.loads(load() or "null")
            if isinstance(kept, dict) and isinstance(kept.get("last"), int):
                self.last = kept["last"]
                if isinstance(kept.get("gap_since"), (int, float)):
                    self._gap_since = float(kept["gap_since"])  # patience runs across restarts
        except Exception:  # unreadable, or the store is away: start counting again
            pass

    @staticmethod
    def _number(txn_id: str) -> int | None:
        return int(txn_id) if txn_id.isascii() and txn_id.isdigit() and len(txn_id) <= 18 else None

    def refused(self) -> None:
        """The appservice refused a transaction (for whatever reason): Synapse recovers now,
        and may leave one behind at its end."""
        self.armed = True
        self._armed_at = self._clock()

    def admit(self, txn_id: str) -> bool:
        """Whether `txn_id` may be handled now; False (once) while an earlier one may be missing."""
        n = self._number(txn_id)
        if n is None or self.last is None or n <= self.last + 1:
            return True
        now = self._clock()
        if not self.armed or txn_id == self._refused:  # (sent again: nothing older was left unsent)
            if txn_id == self._refused or (
                self._last_at is not None and self._last_at - self._armed_at <= self.RECOVERY
            ):
                self.gap_at = now
            return True
        if self._gap_since is None:
            self._gap_since = now
            self._keep()
        if now - self._gap_since >= self.PATIENCE:
            log.warning("transaction %s: %s never came; going on without it", txn_id, self.last + 1)
            self.gap_at = now
            return True
        log.info(
            "transaction %s came after a gap (%s expected): refused once, so that a recovering "
            "homeserver sends one it left behind first",
            txn_id,
            self.last + 1,
        )
        self._refused = txn_id
        self._armed_at = now  # a refusal like any other: Synapse recovers, and may leave one behind
        return False

    def handled(self, txn_id: str) -> None:
        """`txn_id` was handled in full."""
        n = self._number(txn_id)
        if n is None:
            return
        gap = self.last is not None and n > self.last + 1
        if self.armed and (txn_id == self._refused or gap):
            # the refused one came again (after any left behind), or a gap outlived its patience
            self.armed, self._refused = False, None
        if self.last is not None and n < self.last and n != 1:
            return  # a late one let through a gap: the count goes on from the newest
        self.last, self._gap_since, self._last_at = n, None, self._clock()
        self._keep()

    def _keep(self) -> None:
        kept = {"last": self.last}
        if self._gap_since is not None:
            kept["gap_since"] = self._gap_since
        try:
            self._save(json.dumps(kept))
        except Exception as exc:  # the store: the count in memory goes on
            log.info("could not keep the last transaction number: %s", exc)


class TransactionRefused(Exception):
    """Not every event of the transaction could be handled: the homeserver must send it again."""


TransactionHandler = Callable[[Transaction], Awaitable[None]]
UserQuery = Callable[[str], Awaitable[bool]]


def _refused(why: str) -> web.Response:
    """Any status but 2xx makes the homeserver send the transaction again, with backoff."""
    return web.json_response({"errcode": "M_UNKNOWN", "error": why}, status=500)


def _forbidden() -> web.Response:
    return web.json_response({"errcode": "M_FORBIDDEN", "error": "Bad or missing hs_token"}, status=403)


def transaction_key(txn_id: str, events: list[dict], device: DeviceTraffic | None = None) -> str:
    ids = "\n".join(str(event.get("event_id", "")) for event in events)
    if device:  # to-device messages have no ids: their content tells one transaction from another
        ids += "\n" + json.dumps(
            [device.to_device, device.changed, device.left, device.one_time_keys, device.fallback_keys],
            sort_keys=True,
            default=str,
        )
    return f"{txn_id}:{hashlib.sha256(ids.encode('utf-8')).hexdigest()[:16]}"


def _first(body: dict, *names: str) -> Any:
    for name in names:
        if name in body:
            return body[name]
    return None


def _users(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _per_device(value: Any, item: Callable[[Any], Any]) -> dict:
    """user → device → item(value), keeping only well-formed entries."""
    out: dict = {}
    if not isinstance(value, dict):
        return out
    for user, devices in value.items():
        if isinstance(user, str) and isinstance(devices, dict):
            kept = {device: item(v) for device, v in devices.items() if isinstance(device, str) and item(v) is not None}
            if kept:
                out[user] = kept
    return out


def _counts(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)}


def _types(value: Any) -> list[str] | None:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else None


def device_traffic(body: dict) -> DeviceTraffic:
    """The crypto fields of a transaction body; a malformed part is left out, never fatal."""
    to_device = _first(body, "to_device", "de.sorunome.msc2409.to_device")
    lists = _first(body, "device_lists", "org.matrix.msc3202.device_lists")
    lists = lists if isinstance(lists, dict) else {}
    return DeviceTraffic(
        to_device=[m for m in to_device if isinstance(m, dict)] if isinstance(to_device, list) else [],
        changed=_users(lists.get("changed")),
        left=_users(lists.get("left")),
        one_time_keys=_per_device(
            _first(
                body,
                "device_one_time_keys_count",
                "org.matrix.msc3202.device_one_time_keys_count",
                "org.matrix.msc3202.device_one_time_key_counts",
            ),
            _counts,
        ),
        fallback_keys=_per_device(
            _first(body, "device_unused_fallback_key_types", "org.matrix.msc3202.device_unused_fallback_key_types"),
            _types,
        ),
    )


def _hung_up(transport: asyncio.BaseTransport | None) -> bool:
    """Whether the other end of `transport` has closed it: asked of the socket itself (a peek),
    since the event loop may not have read the close yet."""
    if transport is None or transport.is_closing():
        return True
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        peek = socket.socket(fileno=os.dup(sock.fileno()))  # a copy: closing it leaves the original
    except OSError:
        return True
    try:
        return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing to read
    except OSError:
        return True  # reset
    finally:
        peek.close()


class AppserviceServer:
    def __init__(
        self,
        hs_token: str,
        on_transaction: TransactionHandler,
        on_user_query: UserQuery,
        txn_seen: Callable[[str], Awaitable[bool]],
        mark_txn: Callable[[str], Awaitable[None]],
        on_refused: Callable[[Transaction, BaseException], None] | None = None,
        order: TransactionOrder | None = None,
        on_gap: Callable[[Transaction], None] | None = None,
        on_sender_gone: Callable[[float], None] | None = None,
        on_gap_passed: Callable[[Transaction, float], Awaitable[None]] | None = None,
    ):
        self._token = hs_token.encode("utf-8")
        # awaited before each transaction handled once one was let through after a gap (with
        # when): one the homeserver left behind may hold earlier messages (TransactionOrder)
        self._on_gap_passed = on_gap_passed
        # told (with the time the transaction came) when its sender hung up before our answer:
        # what it had queued behind that transaction may be lost (docs/outages.md "Synapse with
        # workers")
        self._on_sender_gone = on_sender_gone
        self._on_refused = on_refused  # told of each transaction refused, and why
        self._on_transaction = on_transaction
        self._on_user_query = on_user_query
        self._txn_seen = txn_seen
        self._mark_txn = mark_txn
        self._txn_lock = asyncio.Lock()  # one transaction at a time keeps events in order
        self._order = order or TransactionOrder()
        self._on_gap = on_gap  # a transaction was refused for a gap: ask for a retry at once
        self.acknowledged = 0  # transactions answered 200 so far (the homeserver is sending)
        self.pinged = asyncio.Event()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        for prefix in ("/_matrix/app/v1", ""):  # unprefixed paths: legacy homeservers
            self.app.router.add_put(prefix + "/transactions/{txn_id}", self.transaction)
            self.app.router.add_get(prefix + "/users/{user_id}", self.user)
            self.app.router.add_get(prefix + "/rooms/{alias}", self.room)
        self.app.router.add_post("/_matrix/app/v1/ping", self.ping)
        self._runner: web.AppRunner | None = None

    def _authorised(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else request.query.get("access_token", "")
        return hmac.compare_digest(token.encode("utf-8"), self._token)

    async def transaction(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        txn_id = request.match_info["txn_id"]
        try:
            body = await request.json()
            events = body.get("events") or []
            ephemeral = body.get("ephemeral") or body.get("de.sorunome.msc2409.ephemeral") or []
            if not isinstance(events, list) or not isinstance(ephemeral, list):
                raise ValueError("events must be a list")
        except (ValueError, json.JSONDecodeError, AttributeError):
            return web.json_response({"errcode": "M_NOT_JSON", "error": "Body is not a transaction"}, status=400)
        transaction = Transaction(
            txn_id,
            [e for e in events if isinstance(e, dict)],
            [e for e in ephemeral if isinstance(e, dict)],
            device_traffic(body),
        )
        key = transaction.key
        came = time.time()
        try:
            return await self._answer(txn_id, transaction, key)
        finally:
            self._sender_still_there(request, came)

    def _sender_still_there(self, request: web.Request, came: float) -> None:
        """A sender that hung up while its transaction was handled (killed mid-transaction:
        Synapse's appservice sender keeps what comes next in memory, and a new one does not send
        it) is said to `on_sender_gone`, which reads back what it may have lost."""
        if _hung_up(request.transport) and self._on_sender_gone is not None:
            log.warning("the homeserver hung up before the answer to its transaction: reading back")
            try:
                self._on_sender_gone(came)
            except Exception:
                log.exception("on_sender_gone failed")

    async def _answer(self, txn_id: str, transaction: Transaction, key: str) -> web.Response:
        async with self._txn_lock:
            try:
                # answered without the two database round trips when its events each have their
                # own record (Transaction.recorded): the homeserver sends nothing newer (the
                # owner's next message) until it has the answer. It still counts in the order
                record = transaction.recorded
                if record and await self._txn_seen(key):
                    # handled before (a kill may have come before its number was kept)
                    self._order.handled(txn_id)
                    self.acknowledged += 1
                    return web.json_response({})
                if not self._order.admit(txn_id):
                    if self._on_gap is not None:
                        self._on_gap(transaction)
                    return _refused(f"transaction {txn_id} came after a gap: send any earlier one first")
                if self._order.gap_at is not None and self._on_gap_passed is not None:
                    await self._on_gap_passed(transaction, self._order.gap_at)
                await self._on_transaction(transaction)
                if record:
                    await self._mark_txn(key)  # only a transaction handled in full is recorded
                self._order.handled(txn_id)
                self.acknowledged += 1
            except TransactionRefused as exc:
                log.warning("%s: the homeserver will send it again", exc)
                self._refused_because(transaction, exc.__cause__ or exc)
                return _refused(str(exc))
            except Exception as exc:  # the store, while checking or recording the key
                log.warning("transaction %s refused: %s", txn_id, exc)
                self._refused_because(transaction, exc)
                return _refused(f"transaction {txn_id} not handled: {exc}")
        return web.json_response({})

    def _refused_because(self, transaction: Transaction, exc: BaseException) -> None:
        self._order.refused()  # the homeserver recovers: it may leave one behind
        if self._on_refused is not None:
            try:
                self._on_refused(transaction, exc)
            except Exception:
                log.exception("on_refused failed")

    async def user(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        if await self._on_user_query(request.match_info["user_id"]):
            return web.json_response({})
        return web.json_response({"errcode": "M_NOT_FOUND", "error": "No such agent"}, status=404)

    async def room(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        return web.json_response({"errcode": "M_NOT_FOUND", "error": "No room aliases here"}, status=404)

    async def ping(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        self.pinged.set()
        return web.json_response({})

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
