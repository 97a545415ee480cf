"""One way in: every incoming event passes the Dispatcher — appservice transactions, the
messages a puppet catches up on when it joins, and (with encryption) decrypted events.

A transaction's crypto traffic (to-device messages, device lists, key counts) goes to the
`Encryption` seam first, so that a room key arrives before the message it opens; then its events,
in order. Each event is checked (type, room, sender, content) and handed to the handler of its
kind (bridge/channels/inbound.py). Events the bridge's own identities sent are not handled: their answers
and notices come back to the appservice and are stored by the turns that made them.

Nothing is lost, nothing runs twice:
- Each event the bridge acts on is de-duplicated by its event id *before* anything runs (a
  command, a numbered answer, a prompt, a reaction, a redaction, a membership), and recorded as
  handled once its handler is done (a `ev:<event id>` key beside the transaction keys). The
  homeserver delivers an event again when a transaction is retried, and after a restart.
- A handler that fails on the infrastructure (the store, the homeserver or the network:
  `StoreError`, `aiohttp.ClientError`, timeouts, a 5xx/429 `MatrixError`) stops the
  transaction there: it is refused (`TransactionRefused`, HTTP 500) and not recorded, so the
  homeserver sends it again; the events handled before it are skipped then. Such errors pass.
- Any other error means the event itself cannot be handled (it is malformed in a way the checks
  did not catch, or the homeserver refused what it asked, 4xx): it is logged, recorded as handled
  and skipped, so that one bad event never blocks the events behind it.

`Encryption` is the seam for end-to-end encryption: what to do with crypto traffic, with a room
that turns out to be encrypted and with an `m.room.encrypted` event. This one cannot read such
rooms and says so once per room; an encrypting one decrypts the event and hands the plain event
back through `Dispatcher.decrypted`, which handles (and de-duplicates) it exactly like a plain
one — the encrypted event itself is not recorded, so one decrypted later is still handled.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Callable

import aiohttp

from store import StoreClosed, StoreError, StoreLockLost, StoreUnavailable

from .appservice import DeviceTraffic, Transaction, TransactionRefused
from ..channels.inbound import Inbound
from ..channels.upgrade import room_upgraded
from .client import MatrixError

if TYPE_CHECKING:
    from ..bridge import Bridge

log = logging.getLogger(__name__)

HANDLED = "ev:"  # the key of a handled event, beside the transaction keys in the store
# the kinds handled for anyone (the others only for an owner; memberships only of our users)
FOR_ANYONE = ("m.room.encryption",)
OWNER_KINDS = ("m.room.message", "m.sticker", "m.poll.start", "org.matrix.msc3381.poll.start",
               "m.reaction", "m.room.redaction", "m.room.name", "m.room.tombstone")


def transient(exc: BaseException) -> bool:
    """An infrastructure failure that may be gone when the homeserver sends the event again."""
    if isinstance(exc, MatrixError):
        return exc.transient
    return isinstance(exc, (StoreError, aiohttp.ClientError, asyncio.TimeoutError, ConnectionError))


class Encryption:
    """The dispatcher's crypto seam. This one reads no encrypted room: crypto traffic is
    dropped, and the bridge says once per room that it cannot read it."""

    def __init__(self, inbound: Inbound):
        self.inbound = inbound

    async def device_traffic(self, traffic: DeviceTraffic) -> None:
        """To-device messages, device lists, one-time-key counts of a transaction, before its
        events; returning means they are kept (the transaction is acknowledged after)."""

    async def room_encrypted(self, room_id: str) -> None:
        """`room_id` is (now) encrypted: its m.room.encryption arrived, or an invite said so."""
        await self.inbound.say_encrypted(room_id)

    async def encrypted_event(self, event: dict, dispatcher: "Dispatcher") -> None:
        """An m.room.encrypted event: decrypt it and pass it on with `dispatcher.decrypted`.
        This one tells the room once that it cannot be read — when the owner wrote it (anyone
        can send an m.room.encrypted event into a plain room)."""
        if self.inbound.bridge.is_owner(str(event.get("sender"))):
            await self.inbound.say_encrypted(event["room_id"])


DOWN_NOTICE_AFTER = 5.0  # seconds of a database outage before the owner is told
DOWN_TEXT = ("⚠️ The bridge cannot reach its database right now. Your messages are not lost: the "
             "homeserver keeps them, and they are answered as soon as the database is back.")
BACK_TEXT = "✅ The database is back: the messages that waited are being answered now."


class StoreOutage:
    """The store went away under the running bridge (PostgreSQL restarted, a SQLite file that
    cannot be written). Transactions are refused meanwhile, so the homeserver keeps every owner
    message (in its own store: bounded by it, nothing held here) and sends them again. This
    watches for the store to come back: then it pings the homeserver, so the refused
    transactions come at once instead of after Synapse's backoff (up to minutes). An outage
    longer than DOWN_NOTICE_AFTER is said once to the rooms whose messages wait, and its end
    too. Another bridge that took the database meanwhile stops this one (one line).

    The writes that end a turn (its message answered, its answer no longer in progress, what
    the agent has seen) are not refused like a transaction: nothing would send them again. A
    turn that ends while the database is down leaves them here (`later`), in order; they are
    written when it is back, before any transaction is handled again (`flush`)."""

    def __init__(self, bridge: "Bridge"):
        self.bridge = bridge
        self.rooms: list[str] = []  # rooms whose messages wait, in the order they came
        self.outages = 0
        self._task: asyncio.Task | None = None
        # at most a few per turn in flight (no turn starts while the database is down)
        self._writes: deque[tuple[str, Callable[[], object]]] = deque()

    def later(self, what: str, write: Callable[[], object]) -> None:
        """Do `write` (a store call, safe to repeat) on the database thread, after every store
        call made before it; if the database is down, once it is back, after the ones left
        before it. A closed store (quitting) drops it: the next start repairs from the turn
        records."""
        self._writes.append((what, write))
        db = getattr(self.bridge, "db", None)
        if db is None:  # no database thread (tests of this class alone)
            self._flush_now(what)
            return
        done = db.thread.run(self.flush)
        done.add_done_callback(lambda future: self._flushed_later(future, what))

    def _flush_now(self, what: str) -> None:
        try:
            self.flush()
        except StoreUnavailable as exc:
            log.info("the database is unavailable: %s is written once it is back", what)
            self.hit(exc, {})

    def _flushed_later(self, future: asyncio.Future, what: str) -> None:
        if future.cancelled():
            return
        exc = future.exception()
        if isinstance(exc, StoreUnavailable):
            log.info("the database is unavailable: %s is written once it is back", what)
            self.hit(exc, {})
        elif exc is not None:
            log.error("%s not written: %s", what, exc)

    def waiting(self) -> bool:
        """Whether writes wait for the database (or are on their way to it)."""
        return bool(self._writes)

    def flush(self) -> None:
        """Write what waits, oldest first (on the database thread); StoreUnavailable (and the
        rest kept) if it is still down."""
        while self._writes:
            what, write = self._writes[0]
            try:
                write()
            except StoreUnavailable:
                raise
            except StoreError as exc:  # closed while quitting, or refused for good
                log.info("%s not written: %s", what, exc)
            self._writes.popleft()

    def hit(self, exc: BaseException, event: dict) -> None:
        if isinstance(exc, StoreLockLost):
            self.bridge.halt(f"another bridge took the database ({exc}): this one stops")
            return
        if not isinstance(exc, StoreUnavailable) or isinstance(exc, StoreClosed):
            return
        room_id = event.get("room_id")
        if isinstance(room_id, str) and room_id not in self.rooms and len(self.rooms) < 100:
            self.rooms.append(room_id)
        if self._task is None or self._task.done():
            self.outages += 1
            log.warning("the database is unavailable (%s): messages wait at the homeserver", exc)
            self._task = asyncio.create_task(self._watch(), name="store-outage")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        began, told = time.monotonic(), False
        try:
            while not (await self._back() and await self._flushed()):
                if not told and time.monotonic() - began >= DOWN_NOTICE_AFTER:
                    told = True
                    await self._say(DOWN_TEXT)
                await asyncio.sleep(max(0.5, min(await self.bridge.db.retry_in(), 5.0)))
        except StoreLockLost as exc:
            self.bridge.halt(f"another bridge took the database ({exc}): this one stops")
            return
        except StoreClosed:
            return
        except Exception:
            log.exception("watching the database failed")
            return
        log.info("the database is back after %.1f s: asking the homeserver for what waits",
                 time.monotonic() - began)
        if told:
            await self._say(BACK_TEXT)
        self.rooms = []
        await self.bridge.ping()

    async def _back(self) -> bool:
        """Whether the store takes writes again (a reconnection is tried when one is due)."""
        store = self.bridge.store

        def probe() -> bool:
            if not store.available():
                return False
            try:
                store.set_value("outage:probe", str(time.time()))  # SQLite: is it writable again?
            except StoreUnavailable:
                return False
            return True
        return await self.bridge.db.run(probe)

    async def _flushed(self) -> bool:
        try:
            await self.bridge.db.run(self.flush)
        except StoreUnavailable:
            return False
        return True

    async def _say(self, text: str) -> None:
        """A notice in each waiting room, by the bot or else a puppet the bridge has (the
        store, which knows who is where, is what is missing)."""
        senders = [self.bridge.bot, *self.bridge.puppets.values()]
        for room_id in self.rooms:
            for sender in senders:
                if sender is None:
                    continue
                try:
                    await sender.intent.send(room_id, {"msgtype": "m.notice", "body": text})
                    break
                except Exception as exc:  # not in that room, or the homeserver: the next one
                    log.info("could not tell %s as %s: %s", room_id, sender.user_id, exc)


class Dispatcher:
    def __init__(self, bridge: "Bridge"):
        self.bridge = bridge
        self.inbound = Inbound(bridge)
        self.outage = StoreOutage(bridge)
        self.encryption: Encryption = Encryption(self.inbound)
        self._handlers = {
            "m.room.member": self.inbound.member,
            "m.room.message": self.inbound.message,
            "m.sticker": self.inbound.message,                      # as an image (bridge/matrix/media.py)
            "m.poll.start": self.inbound.message,                   # as its question and answers
            "org.matrix.msc3381.poll.start": self.inbound.message,
            "m.reaction": self.inbound.reaction,
            "m.room.redaction": self.inbound.redaction,
            "m.room.name": self.inbound.room_name,
            "m.room.tombstone": self._room_upgraded,                # the channel moves (channels/upgrade.py)
        }

    # ---- entry points -------------------------------------------------------------------------

    async def transaction(self, transaction: Transaction) -> None:
        """Handle a transaction; TransactionRefused if it must come again (see above)."""
        log.debug("transaction %s: %d events, %d ephemeral", transaction.txn_id,
                  len(transaction.events), len(transaction.ephemeral))
        try:
            if self.outage.waiting():  # a turn's last writes land before anything newer
                await self.bridge.db.run(self.outage.flush)
            if transaction.device:
                await self._run({"event_id": f"crypto traffic of {transaction.txn_id}"},
                                self.encryption.device_traffic(transaction.device))
            for event in transaction.events:
                await self.event(event)  # stops at the first that must come again: order is kept
        except Exception as exc:  # only transient ones get here
            raise TransactionRefused(f"transaction {transaction.txn_id} not handled: {exc}") from exc

    def refused(self, transaction: Transaction, exc: BaseException) -> None:
        """The appservice refused `transaction` (the homeserver sends it again): a store gone
        away is watched until it is back (StoreOutage)."""
        # the rooms to tell: those of the owner's events, and of channels the bridge has open
        # (the homeserver sends transactions in order: the one refused may hold only our own
        # answer's last edit, the owner's messages wait behind it)
        rooms = [event for event in [*transaction.events, *transaction.ephemeral]
                 if self.bridge.is_owner(str(event.get("sender"))) or event.get("room_id") in self.bridge.portals]
        for event in rooms or [{}]:
            self.outage.hit(exc, event)

    async def event(self, event: dict) -> None:
        """One room event, from a transaction or caught up on. Raises only a transient error."""
        checked = self._checked(event)
        if checked is None:
            return
        kind, room_id, sender, content = checked
        if kind == "m.room.encrypted":  # what it holds is de-duplicated once decrypted
            await self._run(event, self.encryption.encrypted_event(event, self))
            return
        if kind == "m.room.encryption":
            if event.get("state_key") != "":  # a message of that type is not the room's state
                return
            handler = self._room_encrypted
        else:
            handler = self._handlers.get(kind)
        if handler is None or not self._acts_on(kind, sender, event):
            return
        db = self.bridge.db
        event_id = event.get("event_id")
        key = HANDLED + event_id
        if await db.txn_seen(key):
            log.debug("event %s was handled already", event_id)
            return
        await self._run(event, handler(event, room_id, sender, content))
        await db.mark_txn(key)

    async def decrypted(self, event: dict) -> None:
        """An event the encryption seam decrypted: handled exactly like the plain event."""
        if event.get("type") in ("m.room.encrypted", "m.room.encryption"):
            return  # never again through the seam it came out of
        await self.event(event)

    async def _room_upgraded(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        await room_upgraded(self.bridge, event, room_id, sender, content)

    async def _room_encrypted(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        await self.encryption.room_encrypted(room_id)

    async def _run(self, event: dict, handling) -> None:
        """Await a handler: a transient failure passes (the transaction is refused); any other
        is logged and the event counts as handled."""
        try:
            await handling
        except Exception as exc:
            if transient(exc):
                log.warning("event %s: %s; the homeserver will send it again", event.get("event_id"), exc)
                raise
            if isinstance(exc, MatrixError):
                log.warning("event %s: %s", event.get("event_id"), exc)
            else:
                log.exception("event %s could not be handled; skipped", event.get("event_id"))

    # ---- checks -------------------------------------------------------------------------------

    def _checked(self, event: dict) -> tuple[str, str, str, dict] | None:
        """(type, room, sender, content) of an event the bridge may act on; None otherwise."""
        kind, room_id, sender = event.get("type"), event.get("room_id"), event.get("sender")
        if not isinstance(kind, str) or not isinstance(room_id, str) or not isinstance(sender, str):
            return None
        event_id = event.get("event_id")
        if not isinstance(event_id, str) or not event_id:
            return None  # every room event has one; without it nothing could be told apart
        content = event.get("content")
        if not isinstance(content, dict):
            return None
        config = self.bridge.config
        if sender == config.bot_user_id or config.agent_for_user_id(sender):
            return None  # the bridge's own events: its turns store what they sent
        return kind, room_id, sender, content

    def _acts_on(self, kind: str, sender: str, event: dict) -> bool:
        """Whether the handler of `kind` would do anything: only those events are recorded."""
        if kind == "m.room.member":
            target, config = event.get("state_key"), self.bridge.config
            return isinstance(target, str) and (target == config.bot_user_id
                                                or config.agent_for_user_id(target) is not None)
        if kind in OWNER_KINDS:
            return self.bridge.is_owner(sender)
        return kind in FOR_ANYONE
