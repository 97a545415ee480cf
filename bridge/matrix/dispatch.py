"""One way in: every incoming event passes the Dispatcher — appservice transactions, the
messages a puppet catches up on when it joins, and (with encryption) decrypted events.

A transaction's crypto traffic (to-device messages, device lists, key counts) goes to the
`Encryption` seam first, so that a room key arrives before the message it opens; then its events,
in order. Each event is checked (type, room, sender, content) and handed to the handler of its
kind, given by whoever builds the dispatcher (`Inbound`: bridge/channels/events/inbound.py).
Events the bridge's own identities sent are not handled: their answers
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
  A store gone away is watched by the `Outage` the dispatcher is given (bridge/outage.py).
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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import aiohttp

from store import StoreError, keys

from .appservice import DeviceTraffic, Transaction, TransactionRefused
from .client import MatrixError

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

log = logging.getLogger(__name__)

# the kinds handled for anyone (the others only for an owner; memberships only of our users)
FOR_ANYONE = ("m.room.encryption",)
OWNER_KINDS = (
    "m.room.message",
    "m.sticker",
    "m.poll.start",
    "org.matrix.msc3381.poll.start",
    "m.reaction",
    "m.room.redaction",
    "m.room.name",
    "m.room.tombstone",
)


def transient(exc: BaseException) -> bool:
    """An infrastructure failure that may be gone when the homeserver sends the event again."""
    if isinstance(exc, MatrixError):
        return exc.transient
    return isinstance(exc, (StoreError, aiohttp.ClientError, asyncio.TimeoutError, ConnectionError))


class Encryption:
    """The dispatcher's crypto seam. This one reads no encrypted room: crypto traffic is
    dropped, and the bridge says once per room that it cannot read it."""

    def __init__(self, say_encrypted: Callable[[str], Awaitable[None]], is_owner: Callable[[str], bool]):
        self.say_encrypted = say_encrypted  # the room's one line (channels/events/inbound.py)
        self.is_owner = is_owner

    async def device_traffic(self, traffic: DeviceTraffic) -> None:
        """To-device messages, device lists, one-time-key counts of a transaction, before its
        events; returning means they are kept (the transaction is acknowledged after)."""

    async def room_encrypted(self, room_id: str) -> None:
        """`room_id` is (now) encrypted: its m.room.encryption arrived, or an invite said so."""
        await self.say_encrypted(room_id)

    async def encrypted_event(self, event: dict, dispatcher: Dispatcher) -> None:
        """An m.room.encrypted event: decrypt it and pass it on with `dispatcher.decrypted`.
        This one tells the room once that it cannot be read — when the owner wrote it (anyone
        can send an m.room.encrypted event into a plain room)."""
        if self.is_owner(str(event.get("sender"))):
            await self.say_encrypted(event["room_id"])


# (event, room, sender, content) → True when the handler recorded the event as handled itself,
# in the same write as what it did (keys.handled_event); else the dispatcher records it
Handler = Callable[[dict, str, str, dict], Awaitable["bool | None"]]


class Outage(Protocol):
    """The watch over a store that went away (bridge/outage.py): what waits is written before
    any newer transaction, and a refused transaction's rooms are told."""

    def waiting(self) -> bool: ...
    def flush(self) -> None: ...
    def hit(self, exc: BaseException, event: dict) -> None: ...


class Dispatcher:
    def __init__(
        self,
        config: Config,
        db: OffLoop,
        handlers: dict[str, Handler],
        outage: Outage,
        encryption: Encryption,
        is_channel: Callable[[str], bool] = lambda room_id: False,
    ):
        """`handlers`: the handler of each event kind, from whoever builds the dispatcher
        (`Inbound`: channels/events/inbound.py); `is_channel`: whether a room is a channel the bridge has
        open (a refused transaction's rooms to tell)."""
        self.config = config
        self.db = db
        self.outage = outage
        self.encryption = encryption
        self.is_channel = is_channel
        self._handlers = dict(handlers)
        # events being handled now, by event id: the same event from two ways at once (read back
        # after the homeserver was away, and in the transaction it sends again) runs once
        self._handling: dict[str, asyncio.Future] = {}

    # ---- entry points -------------------------------------------------------------------------

    async def transaction(self, transaction: Transaction) -> None:
        """Handle a transaction; TransactionRefused if it must come again (see above)."""
        log.debug(
            "transaction %s: %d events, %d ephemeral",
            transaction.txn_id,
            len(transaction.events),
            len(transaction.ephemeral),
        )
        try:
            if self.outage.waiting():  # a turn's last writes land before anything newer
                await self.db.run(self.outage.flush)
            if transaction.device:
                await self._run(
                    {"event_id": f"crypto traffic of {transaction.txn_id}"},
                    self.encryption.device_traffic(transaction.device),
                )
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
        rooms = [
            event
            for event in [*transaction.events, *transaction.ephemeral]
            if self._is_owner(str(event.get("sender"))) or self.is_channel(event.get("room_id"))
        ]
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
        event_id = event.get("event_id")
        while (earlier := self._handling.get(event_id)) is not None:
            await asyncio.wait({earlier})  # then it is found handled (or, refused, handled here)
        handling = self._handling[event_id] = asyncio.get_running_loop().create_future()
        try:
            await self._handle_once(event, event_id, lambda: handler(event, room_id, sender, content))
        finally:
            del self._handling[event_id]
            handling.set_result(None)

    async def _handle_once(self, event: dict, event_id, handle: Callable[[], Awaitable]) -> None:
        db = self.db
        key = keys.handled_event(event_id)
        if await db.txn_seen(key):
            log.debug("event %s was handled already", event_id)
            return
        if await self._run(event, handle()):
            return  # the handler recorded it with its own write (an owner message and its turns)
        # not waited for: the database thread writes it before any later call (the next event's
        # check), and a homeserver that sends the event again sends it after this answer
        store = db.target
        db.soon(f"event {event_id} handled", lambda: store.mark_txn(key))

    async def decrypted(self, event: dict) -> None:
        """An event the encryption seam decrypted: handled exactly like the plain event."""
        if event.get("type") in ("m.room.encrypted", "m.room.encryption"):
            return  # never again through the seam it came out of
        await self.event(event)

    async def _room_encrypted(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        await self.encryption.room_encrypted(room_id)

    async def _run(self, event: dict, handling) -> bool | None:
        """Await a handler, and return what it returns: a transient failure passes (the
        transaction is refused); any other is logged and the event counts as handled."""
        try:
            return await handling
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
        config = self.config
        if sender == config.bot_user_id or config.agent_for_user_id(sender):
            return None  # the bridge's own events: its turns store what they sent
        return kind, room_id, sender, content

    def _acts_on(self, kind: str, sender: str, event: dict) -> bool:
        """Whether the handler of `kind` would do anything: only those events are recorded."""
        if kind == "m.room.member":
            target, config = event.get("state_key"), self.config
            return isinstance(target, str) and (
                target == config.bot_user_id or config.agent_for_user_id(target) is not None
            )
        if kind in OWNER_KINDS:
            return self._is_owner(sender)
        return kind in FOR_ANYONE

    def _is_owner(self, user_id: str) -> bool:
        return user_id in self.config.owners
