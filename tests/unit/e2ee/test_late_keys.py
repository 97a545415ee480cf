"""A message whose room key comes late: waited for, asked for, told once, answered once."""

import asyncio
from types import SimpleNamespace

import pytest

from bridge.e2ee import crypto
from bridge.e2ee.crypto import E2EE, Decrypting
from store import Store
from store.offloop import OffLoop


@pytest.fixture
def parts():
    parts = Parts()
    yield parts
    parts.store.close()


class Parts:
    """What E2EE is handed (the config, the store) and its dispatcher's seam (the channels, the
    identities, the notices)."""

    def __init__(self):
        self.store = Store.open(":memory:")
        self.db = OffLoop(self.store)  # the store's calls off the loop, as the bridge makes them
        self.notices = []
        self.bot = None

        class config:
            bot_user_id = "@sidekicks:localhost"
            owners = ("@owner:localhost",)

        self.config = config

    async def portal_for(self, room_id):
        return SimpleNamespace(room_id=room_id, member_names=lambda: [])

    async def in_channel(self, room_id, members, text):
        self.notices.append((room_id, text))

    def e2ee(self) -> E2EE:
        return E2EE(self.config, self.db, "as-token")

    def seam(self, e2ee: E2EE) -> Decrypting:
        """The dispatcher's crypto seam over `e2ee`, which tells rooms through these parts."""
        return Decrypting(e2ee, channels=self, identities=self, notices=self)


class FakeDevice:
    """Has the key once `key` is set; asked for it by request_key."""

    user_id = "@sk_alice:localhost"

    def __init__(self):
        self.key = False
        self.requests = 0
        self.nio = type("N", (), {"rooms": {"!r": object()}})()

    def decrypt(self, event):
        if not self.key:
            return None
        return {**event, "type": "m.room.message", "content": {"msgtype": "m.text", "body": "late"}}

    def has_key(self, room_id, sender_key, session_id):
        return self.key

    async def request_key(self, event):
        self.requests += 1


class Dispatcher:
    def __init__(self):
        self.handled = []

    async def decrypted(self, event):
        self.handled.append(event["event_id"])


EVENT = {
    "event_id": "$e",
    "type": "m.room.encrypted",
    "room_id": "!r",
    "sender": "@owner:localhost",
    "content": {
        "algorithm": "m.megolm.v1.aes-sha2",
        "session_id": "S",
        "sender_key": "K",
        "ciphertext": "x",
        "device_id": "D",
    },
}


async def test_a_late_key_is_asked_for_told_once_and_the_message_answered_once(monkeypatch, parts):
    monkeypatch.setattr(crypto, "KEY_WAIT", 0.01)
    monkeypatch.setattr(crypto, "KEY_NOTICE_AFTER", 0.05)
    device, dispatcher = FakeDevice(), Dispatcher()
    e2ee = parts.e2ee()
    e2ee.devices[device.user_id] = device
    e2ee._dispatcher = dispatcher
    seam = parts.seam(e2ee)
    await seam.encrypted_event(EVENT, dispatcher)
    assert dispatcher.handled == []
    await parts.db.run(lambda: None)  # the writes made so far are done (the thread keeps order)
    assert [e["event_id"] for e in parts.store.e2ee.waiting("!r", "S")] == ["$e"]  # kept
    await asyncio.gather(*e2ee._tasks)
    assert device.requests == 1
    assert len(parts.notices) == 1 and "could not be decrypted" in parts.notices[0][1]
    # delivered again (a retried transaction): not told twice
    await seam.encrypted_event(EVENT, dispatcher)
    await asyncio.gather(*e2ee._tasks)
    assert len(parts.notices) == 1
    # the key comes: handled now, once, and no longer pending
    device.key = True
    e2ee._room_key(device, "!r", "S")
    await asyncio.gather(*e2ee._tasks)
    assert dispatcher.handled == ["$e"]
    await parts.db.run(lambda: None)
    assert parts.store.e2ee.waiting() == []
    e2ee._room_key(device, "!r", "S")
    await asyncio.gather(*e2ee._tasks)
    assert dispatcher.handled == ["$e"]


async def test_pending_messages_are_tried_again_at_the_next_start(parts):
    device, dispatcher = FakeDevice(), Dispatcher()
    parts.store.e2ee.wait("$e", "!r", "S", EVENT)  # kept by the last run
    e2ee = parts.e2ee()
    device.key = True
    e2ee.devices[device.user_id] = device
    device.nio = type("N", (), {"rooms": {}})()
    e2ee._dispatcher = dispatcher
    await e2ee._retry_pending()
    assert dispatcher.handled == ["$e"]
    await parts.db.run(lambda: None)
    assert parts.store.e2ee.waiting() == []


async def test_a_strangers_undecryptable_message_is_not_waited_for_nor_told(parts):
    device, dispatcher = FakeDevice(), Dispatcher()
    e2ee = parts.e2ee()
    e2ee.devices[device.user_id] = device
    await parts.seam(e2ee).encrypted_event({**EVENT, "sender": "@stranger:localhost"}, dispatcher)
    await parts.db.run(lambda: None)
    assert not e2ee._tasks and not parts.notices and parts.store.e2ee.waiting() == []


async def test_the_encrypted_rooms_are_kept_for_the_next_start(parts):
    e2ee = parts.e2ee()
    e2ee.mark_encrypted("!r")
    e2ee.mark_encrypted("!r")
    await parts.db.run(lambda: None)
    assert parts.store.e2ee.encrypted_rooms() == ["!r"]
    assert parts.e2ee().rooms == {"!r"}


async def test_a_write_the_store_refused_is_written_with_the_next(monkeypatch, parts):
    """A waiting event or an encrypted room whose row the store refused (it was away) is written
    again with the next write: a restart then still finds it."""
    e2ee = parts.e2ee()
    real_wait, refused = parts.store.e2ee.wait, []

    def away_once(*args, **kwargs):
        if not refused:
            refused.append(args[0])
            raise RuntimeError("the database is away")
        return real_wait(*args, **kwargs)

    monkeypatch.setattr(parts.store.e2ee, "wait", away_once)
    e2ee._keep_pending(EVENT)
    await parts.db.run(lambda: None)
    assert refused == ["$e"] and parts.store.e2ee.waiting() == []
    e2ee.mark_encrypted("!r")  # the next write takes the refused one along
    await parts.db.run(lambda: None)
    assert [e["event_id"] for e in parts.store.e2ee.waiting()] == ["$e"]
    assert parts.store.e2ee.encrypted_rooms() == ["!r"] and e2ee._unsaved == {}
    # an event handled before its refused row was written is not kept waiting
    refused.clear()
    other = {**EVENT, "event_id": "$f"}
    e2ee._keep_pending(other)
    await parts.db.run(lambda: None)
    e2ee._drop_pending("$f")
    await parts.db.run(lambda: None)
    assert [e["event_id"] for e in parts.store.e2ee.waiting()] == ["$e"]
