"""One way in: every incoming event passes the Dispatcher — appservice transactions, the
messages a puppet catches up on when it joins, and (with encryption) decrypted events.

A transaction's crypto traffic (to-device messages, device lists, key counts) goes to the
`Encryption` seam first, so that a room key arrives before the message it opens; then its events,
in order. Each event is checked (type, room, sender, content) and handed to the handler of its
kind (bridge/inbound.py). Events the bridge's own identities sent are not handled: their answers
and notices come back to the appservice and are stored by the turns that made them.

`Encryption` is the seam for end-to-end encryption: what to do with crypto traffic, with a room
that turns out to be encrypted and with an `m.room.encrypted` event. This one cannot read such
rooms and says so once per room; an encrypting one decrypts the event and hands the plain event
back through `Dispatcher.decrypted`, which handles it exactly like a plain one.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aiohttp

from .appservice import DeviceTraffic, Transaction
from .inbound import Inbound
from .matrix import MatrixError

if TYPE_CHECKING:
    from .bridge import Bridge

log = logging.getLogger(__name__)


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
        """An m.room.encrypted event: decrypt it and pass it on with `dispatcher.decrypted`."""
        await self.inbound.say_encrypted(event["room_id"])


class Dispatcher:
    def __init__(self, bridge: "Bridge"):
        self.bridge = bridge
        self.inbound = Inbound(bridge)
        self.encryption: Encryption = Encryption(self.inbound)
        self._handlers = {
            "m.room.member": self.inbound.member,
            "m.room.message": self.inbound.message,
            "m.reaction": self.inbound.reaction,
            "m.room.redaction": self.inbound.redaction,
            "m.room.name": self.inbound.room_name,
        }

    # ---- entry points -------------------------------------------------------------------------

    async def transaction(self, transaction: Transaction) -> None:
        log.debug("transaction %s: %d events, %d ephemeral", transaction.txn_id,
                  len(transaction.events), len(transaction.ephemeral))
        if transaction.device:
            await self.encryption.device_traffic(transaction.device)
        for event in transaction.events:
            try:
                await self.event(event)
            except (MatrixError, aiohttp.ClientError) as exc:
                log.warning("event %s: %s", event.get("event_id"), exc)
            except Exception:
                log.exception("event %s could not be handled", event.get("event_id"))

    async def event(self, event: dict) -> None:
        """One room event, from a transaction or caught up on."""
        checked = self._checked(event)
        if checked is None:
            return
        kind, room_id, sender, content = checked
        if kind == "m.room.encrypted":
            await self.encryption.encrypted_event(event, self)
        elif kind == "m.room.encryption":
            await self.encryption.room_encrypted(room_id)
        else:
            handler = self._handlers.get(kind)
            if handler is not None:
                await handler(event, room_id, sender, content)

    async def decrypted(self, event: dict) -> None:
        """An event the encryption seam decrypted: handled exactly like the plain event."""
        if event.get("type") in ("m.room.encrypted", "m.room.encryption"):
            return  # never again through the seam it came out of
        await self.event(event)

    # ---- checks -------------------------------------------------------------------------------

    def _checked(self, event: dict) -> tuple[str, str, str, dict] | None:
        """(type, room, sender, content) of an event the bridge may act on; None otherwise."""
        kind, room_id, sender = event.get("type"), event.get("room_id"), event.get("sender")
        if not isinstance(kind, str) or not isinstance(room_id, str) or not isinstance(sender, str):
            return None
        content = event.get("content")
        if not isinstance(content, dict):
            return None
        config = self.bridge.config
        if sender == config.bot_user_id or config.agent_for_user_id(sender):
            return None  # the bridge's own events: its turns store what they sent
        return kind, room_id, sender, content
