"""The bridge's end-to-end encryption: a device per identity (device.py), plugged into the two
seams — `EncryptingOutgoing.prepare` (every room event an identity sends in an encrypted room
leaves as m.room.encrypted) and `Decrypting` (the dispatcher's crypto hooks).

Reading: an m.room.encrypted event is decrypted with the room key of whichever of the bridge's
devices received it, and handed to `Dispatcher.decrypted`, which handles it exactly like a plain
event (and de-duplicates it by its event id). A key that has not arrived yet is waited for a
moment (the owner's client sends it just before the message, by another path); then the
sender's device is asked for it, and after KEY_NOTICE_AFTER the room is told in one line. The
event waits in the store (`store.e2ee`: a row of `sk_e2ee_pending`) meanwhile: when its key comes
— also after a restart — it is handled then, once. The rooms known to be encrypted are kept there
too (`sk_e2ee_room`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..matrix.client import localpart
from ..matrix.dispatch import Encryption
from ..matrix.intent import Outgoing
from .device import MEGOLM, Device

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from ..channels.base.notices import Notices
    from ..channels.base.registry import Channels
    from ..matrix.dispatch import Dispatcher
    from ..matrix.identities import Identities

log = logging.getLogger(__name__)

KEY_WAIT = 3.0  # seconds an event waits in line for its room key
KEY_NOTICE_AFTER = 10.0  # seconds after which the room is told the message cannot be read (yet)
PENDING_MAX = 500  # the events the store keeps waiting for a key, the newest
UNREADABLE = (
    "🔒 A message could not be decrypted: the bridge's device did not get its key. "
    "If it does not come by itself, send the message again; in Element, check that "
    '"Never send encrypted messages to unverified sessions" is off for this room.'
)
UNREADABLE_BOT = (
    "🔒 This room is encrypted, and the bridge bot cannot read encrypted messages "
    "here. Send commands in the bot's unencrypted direct chat (or any channel)."
)
# (only where the homeserver does not send the bot's crypto traffic: `homeserver.device_traffic`)
RENEWED = (
    "🔐 The bridge's encryption store was lost or could not be read, so its agents have "
    "new devices. Earlier encrypted messages stay unreadable to them; new ones are read "
    "and answered as usual."
)


class E2EE:
    """The devices, their keys, the rooms known to be encrypted and the events waiting for a
    key: made before the identities, which send through its `outgoing`. What is told in a room
    is `Decrypting`'s, made once the channels and the identities are."""

    def __init__(self, config: Config, db: OffLoop, as_token: str):
        self.config, self.db, self.as_token = config, db, as_token
        self.devices: dict[str, Device] = {}
        self.rooms: set[str] = set(self._load(lambda store: store.e2ee.encrypted_rooms()))
        self.outgoing = EncryptingOutgoing(self)
        self._key_news: dict[tuple[str, str], asyncio.Event] = {}
        self._pending: dict[str, dict] = {
            e["event_id"]: e
            for e in self._load(lambda store: store.e2ee.waiting())
            if isinstance(e.get("event_id"), str) and isinstance(e.get("room_id"), str)
        }
        self._unsaved: dict[tuple, Any] = {}  # store writes not yet done: tried again with the next
        self._tasks: set[asyncio.Task] = set()
        self._dispatcher: Dispatcher | None = None
        # the homeserver sends the bot's crypto traffic in transactions: the bot's device reads
        self.bot_reads = bool(getattr(config, "device_traffic", False))

    def is_owner(self, user_id: str) -> bool:
        return user_id in self.config.owners

    # ---- store ----------------------------------------------------------------------------------

    def _load(self, read) -> list:
        try:
            return list(read(self.db.target))
        except Exception:
            return []

    def _keep_pending(self, event: dict) -> None:
        """`event` waits for its key in the store too (kept over a restart)."""
        event_id, room_id = event["event_id"], event["room_id"]
        session_id = str(event["content"].get("session_id", ""))
        self._write(
            ("event", event_id),
            "an undecryptable event",
            lambda store: store.e2ee.wait(event_id, room_id, session_id, event, PENDING_MAX),
        )

    def _drop_pending(self, event_id: str) -> None:
        self._write(("event", event_id), "an undecryptable event handled", lambda store: store.e2ee.done(event_id))

    def wait_for_key(self, event: dict) -> bool:
        """`event` waits for its key (here and in the store); False if it waits already."""
        if event.get("event_id") in self._pending:
            return False
        self._pending[event["event_id"]] = event
        self._keep_pending(event)
        return True

    def waits(self, event_id: str) -> bool:
        return event_id in self._pending

    def handled(self, event_id: str) -> None:
        """`event_id` was decrypted and handled: it waits no more."""
        if self._pending.pop(event_id, None) is not None:
            self._drop_pending(event_id)

    def _write(self, key: tuple, what: str, write) -> None:
        """`write(store)` on the database thread, not waited for. One that fails (the store is
        away) is written again with the next: each is a row of its own, and a row lost would be
        an event never decrypted after a restart. The newest write of a key replaces an older
        one still unwritten (an event handled is not kept waiting); every write may repeat."""
        self._unsaved[key] = write
        writes = list(self._unsaved.items())
        store = self.db.target

        def flush() -> None:
            for _, each in writes:
                each(store)

        def settled(future) -> None:
            if future.cancelled() or future.exception() is not None:
                log.info(
                    "%s not written (again with the next): %s",
                    what,
                    "cancelled" if future.cancelled() else future.exception(),
                )
                return
            for done_key, each in writes:
                if self._unsaved.get(done_key) is each:
                    del self._unsaved[done_key]

        self.db.thread.run(flush).add_done_callback(settled)

    # ---- life cycle -----------------------------------------------------------------------------

    def folder(self, user_id: str) -> Path:
        return Path(self.config.data_dir) / "e2ee" / localpart(user_id)

    async def start(self, user_ids: list[str], dispatcher: Dispatcher) -> list[str]:
        """A device for each identity (made once, reused); the reasons of devices made anew."""
        self._dispatcher = dispatcher
        root = Path(self.config.data_dir) / "e2ee"
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        for user_id in user_ids:
            if user_id not in self.devices:
                self.devices[user_id] = Device(
                    user_id,
                    self.config.homeserver_url,
                    self.as_token,
                    self.folder(user_id),
                    on_room_key=self._room_key,
                    syncs=user_id != self.config.bot_user_id,
                    may_request=self.is_owner,
                )
        await asyncio.gather(*(device.start() for device in self.devices.values() if device.nio is None))
        renewed = [f"{d.user_id}: {d.renewed}" for d in self.devices.values() if d.renewed]
        for device in self.devices.values():
            device.renewed = None
        if self._pending:
            self.spawn(self._retry_pending(), "e2ee pending")
        return renewed

    async def add(self, user_id: str) -> None:
        """A device for an identity that came after start."""
        if user_id in self.devices or self._dispatcher is None:
            return
        await self.start([user_id], self._dispatcher)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(device.stop() for device in self.devices.values()), return_exceptions=True)

    def spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- rooms ----------------------------------------------------------------------------------

    def mark_encrypted(self, room_id: str, settings_changed: bool = False) -> None:
        if settings_changed:  # an m.room.encryption event: the next event starts a new key
            for device in self.devices.values():
                device.forget_settings(room_id)
        if room_id not in self.rooms:
            self.rooms.add(room_id)
            self._write(("room", room_id), "an encrypted room", lambda store: store.e2ee.mark_encrypted(room_id))
            log.info("%s is encrypted: events sent there are encrypted from now on", room_id)

    async def confirm_encrypted(self, room_id: str) -> None:
        """Mark `room_id` encrypted if its state says so (an encrypted event came where the
        bridge had not seen the state: a room older than its invite, a mark lost)."""
        devices = sorted(
            (d for d in self.devices.values() if d.nio is not None), key=lambda d: room_id not in d.nio.rooms
        )  # members of the room first
        for device in devices:
            try:
                state = await device.encryption_state(room_id)
            except Exception as exc:  # the homeserver away: the next encrypted event asks again
                log.info("%s: the encryption state of %s could not be read: %s", device.user_id, room_id, exc)
                return
            if state is None:
                continue
            if state.get("algorithm"):
                self.mark_encrypted(room_id)
            else:
                log.info(
                    "%s: an m.room.encrypted event in a room without encryption: the room stays unencrypted", room_id
                )
            return

    def is_encrypted(self, user_id: str, room_id: str) -> bool:
        if room_id in self.rooms:
            return True
        device = self.devices.get(user_id)
        return device is not None and device.nio is not None and device.encrypted(room_id)

    # ---- reading --------------------------------------------------------------------------------

    def _room_key(self, device: Device, room_id: str, session_id: str) -> None:
        news = self._key_news.get((room_id, session_id))
        if news is not None:
            news.set()
        if any(
            e["room_id"] == room_id and e["content"].get("session_id") == session_id for e in self._pending.values()
        ):
            self.spawn(self._retry_pending(), "e2ee key arrived")

    def decrypt(self, event: dict) -> dict | None:
        """The plain event, decrypted by the first device that has its key; None if none has."""
        for device in self.devices.values():
            if device.nio is None:
                continue
            try:
                plain = device.decrypt(event)
            except ValueError as exc:
                log.warning("%s", exc)
                return None
            if plain is not None:
                return plain
        return None

    async def wait_key(self, event: dict, timeout: float) -> bool:
        key = (event["room_id"], event["content"].get("session_id", ""))
        news = self._key_news.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(news.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            if self._key_news.get(key) is news and not news.is_set():
                pass

    def has_key(self, event: dict) -> bool:
        content = event["content"]
        return any(
            d.nio is not None
            and d.has_key(event["room_id"], content.get("sender_key", ""), content.get("session_id", ""))
            for d in self.devices.values()
        )

    async def request_key(self, event: dict) -> None:
        """Ask the sender's devices for `event`'s key, as a device in its room."""
        for device in self.devices.values():
            if device.nio is not None and event["room_id"] in device.nio.rooms:
                try:
                    await device.request_key(event)
                except Exception as exc:
                    log.info("key request as %s failed: %s", device.user_id, exc)
                break

    async def _retry_pending(self) -> None:
        dispatcher = self._dispatcher
        for event_id, event in list(self._pending.items()):
            plain = self.decrypt(event)
            if plain is None or dispatcher is None:
                continue
            try:
                await dispatcher.decrypted(plain)
            except Exception as exc:
                log.warning("%s: decrypted late but not handled yet: %s", event_id, exc)
                continue
            log.info("%s: its room key came late: handled now", event_id)
            self.handled(event_id)

    # ---- crypto traffic of transactions ---------------------------------------------------------

    async def device_traffic(self, traffic) -> None:
        """The bot's share of a transaction's crypto traffic, into the bot's device (which has no
        /sync). The puppets' share is not used: their devices get the same by their own /sync."""
        if not self.bot_reads:
            return
        bot_id = self.config.bot_user_id
        device = self.devices.get(bot_id)
        if device is None or device.nio is None or device.syncs:
            return
        device_id = device.device_id
        to_device = [
            m for m in traffic.to_device if m.get("to_user_id") == bot_id and m.get("to_device_id") in (device_id, "*")
        ]
        one_time_keys = (traffic.one_time_keys.get(bot_id) or {}).get(device_id)
        fallback_keys = (traffic.fallback_keys.get(bot_id) or {}).get(device_id)
        if not (to_device or one_time_keys or fallback_keys is not None or traffic.changed or traffic.left):
            return
        log.debug(
            "crypto traffic for the bot: %d to-device, counts %s, %d changed, %d left",
            len(to_device),
            one_time_keys,
            len(traffic.changed),
            len(traffic.left),
        )
        await device.receive_traffic(to_device, one_time_keys, fallback_keys, traffic.changed, traffic.left)

    # ---- writing --------------------------------------------------------------------------------

    async def encrypt(self, user_id: str, room_id: str, event_type: str, content: dict) -> tuple[str, dict]:
        if not self.is_encrypted(user_id, room_id):
            device = self.devices.get(user_id)
            if device is None or device.nio is None or room_id in device.nio.rooms:
                return event_type, content
            # a room this device has not synced yet: its state says whether it is encrypted
            room = await device.room(room_id, 5.0)
            if room is None or not self.is_encrypted(user_id, room_id):
                return event_type, content
        device = self.devices.get(user_id)
        if device is None or device.nio is None:
            from ..matrix.client import MatrixError

            raise MatrixError(f"{user_id} has no device to encrypt with in {room_id}", None)
        return "m.room.encrypted", await device.encrypt(room_id, event_type, content)


class EncryptingOutgoing(Outgoing):
    def __init__(self, e2ee: E2EE):
        self.e2ee = e2ee

    async def prepare(self, user_id: str, room_id: str, event_type: str, content: dict) -> tuple[str, dict]:
        return await self.e2ee.encrypt(user_id, room_id, event_type, content)

    async def encrypts(self, user_id: str, room_id: str) -> bool:
        return self.e2ee.is_encrypted(user_id, room_id)

    def new_room(self, user_id: str, body: dict) -> dict:
        """Rooms the bridge makes are encrypted (not spaces: they carry no messages), the bot's
        DM with an owner too where the bot's device reads (its crypto traffic comes in the
        transactions); where it does not, that DM stays unencrypted, so commands can be read."""
        if (body.get("creation_content") or {}).get("type") == "m.space":
            return body
        if body.get("is_direct") and user_id == self.e2ee.config.bot_user_id and not self.e2ee.bot_reads:
            return body
        state = [s for s in body.get("initial_state") or [] if s.get("type") != "m.room.encryption"]
        state.append({"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}})
        return {**body, "initial_state": state}


class Decrypting(Encryption):
    """The dispatcher's crypto seam with encryption on: the puppets' crypto traffic comes by
    each device's own /sync (any homeserver); the bot's, which has no /sync, by the transactions
    where the homeserver sends it (`E2EE.device_traffic`). Encrypted rooms are read; a message
    whose key does not come is told in its room, through the open channels, the bot and the
    notices it is handed."""

    def __init__(self, e2ee: E2EE, channels: Channels, identities: Identities, notices: Notices):
        self.e2ee, self.channels, self.identities, self.notices = e2ee, channels, identities, notices
        self._told: set[str] = set()  # the events whose room was told they cannot be read

    async def device_traffic(self, traffic) -> None:
        await self.e2ee.device_traffic(traffic)

    async def room_encrypted(self, room_id: str) -> None:
        self.e2ee.mark_encrypted(room_id, settings_changed=True)

    async def encrypted_event(self, event: dict, dispatcher: Dispatcher) -> None:
        e2ee, content = self.e2ee, event.get("content") or {}
        if content.get("algorithm") != MEGOLM or not isinstance(content.get("session_id"), str):
            log.info("%s: not a Megolm event (%s): skipped", event.get("event_id"), content.get("algorithm"))
            return
        if event["room_id"] not in e2ee.rooms:
            # only the room's m.room.encryption state says it is encrypted: anyone can send an
            # m.room.encrypted event into a plain room (docs/SECURITY.md "What a stranger cannot do")
            await e2ee.confirm_encrypted(event["room_id"])
        plain = e2ee.decrypt(event)
        # the key travels by the devices' /sync, the event by the appservice: a moment apart —
        # but in a room of the bot's alone, the key comes in the transactions, before the event
        # or in a later one (which waits behind this one): no use waiting then
        by_sync = not (e2ee.bot_reads and await self.channels.portal_for(event["room_id"]) is None)
        if plain is None and by_sync and e2ee.is_owner(str(event.get("sender"))) and not e2ee.has_key(event):
            if await e2ee.wait_key(event, KEY_WAIT) or e2ee.has_key(event):
                plain = e2ee.decrypt(event)
        if plain is not None:
            await dispatcher.decrypted(plain)
            e2ee.handled(event["event_id"])
            return
        if not e2ee.is_owner(str(event.get("sender"))):
            return  # a stranger's message would be ignored anyway
        if not e2ee.wait_for_key(event):
            return  # it waits already
        log.warning(
            "%s in %s: no room key yet (session %s): asking for it",
            event.get("event_id"),
            event["room_id"],
            content.get("session_id"),
        )
        e2ee.spawn(self._chase(event), f"e2ee key of {event.get('event_id')}")

    async def _chase(self, event: dict) -> None:
        """Ask for the key; tell the room if it has not come after KEY_NOTICE_AFTER."""
        e2ee = self.e2ee
        await e2ee.request_key(event)
        if await e2ee.wait_key(event, KEY_NOTICE_AFTER) or e2ee.has_key(event):
            return  # E2EE._retry_pending handles it
        if not e2ee.waits(event["event_id"]) or event["event_id"] in self._told:
            return
        self._told.add(event["event_id"])
        portal = await self.channels.portal_for(event["room_id"])
        if portal is not None:
            await self.notices.in_channel(portal.room_id, portal.member_names(), UNREADABLE)
        elif self.identities.bot is not None:  # a room of the bot's alone
            await self.notices.send(
                self.identities.bot, event["room_id"], UNREADABLE if e2ee.bot_reads else UNREADABLE_BOT
            )
