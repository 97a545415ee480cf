"""The way in: the appservice's crypto fields (MSC2409 / MSC3202) reach the dispatcher's
encryption seam, before the transaction's events; events of every source pass the dispatcher."""

from __future__ import annotations

from appservice_kit import AUTH, serving

from bridge.matrix.appservice import DeviceTraffic, Transaction, device_traffic, transaction_key
from bridge.matrix.dispatch import OWNER_KINDS, Dispatcher, Encryption
from store import keys

TO_DEVICE = {
    "type": "m.room.encrypted",
    "sender": "@owner:localhost",
    "to_user_id": "@sk_alice:localhost",
    "to_device_id": "ALICEDEV",
    "content": {"algorithm": "m.olm.v1.curve25519-aes-sha2", "ciphertext": {}},
}


def test_the_crypto_fields_of_a_transaction_are_parsed_under_either_name():
    unstable = device_traffic(
        {
            "de.sorunome.msc2409.to_device": [TO_DEVICE, "junk"],
            "org.matrix.msc3202.device_lists": {"changed": ["@owner:localhost", 7], "left": ["@gone:localhost"]},
            "org.matrix.msc3202.device_one_time_key_counts": {
                "@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 20, "bad": "x"}}
            },
            "org.matrix.msc3202.device_unused_fallback_key_types": {
                "@sk_alice:localhost": {"ALICEDEV": ["signed_curve25519"]},
                "@bad:localhost": [],
            },
        }
    )
    assert unstable.to_device == [TO_DEVICE]
    assert unstable.changed == ["@owner:localhost"] and unstable.left == ["@gone:localhost"]
    assert unstable.one_time_keys == {"@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 20}}}
    assert unstable.fallback_keys == {"@sk_alice:localhost": {"ALICEDEV": ["signed_curve25519"]}}
    stable = device_traffic(
        {
            "to_device": [TO_DEVICE],
            "device_lists": {"changed": ["@b:localhost"]},
            "device_one_time_keys_count": {"@sk_bob:localhost": {"D": {"signed_curve25519": 3}}},
            "device_unused_fallback_key_types": {"@sk_bob:localhost": {"D": []}},
        }
    )
    assert stable.to_device == [TO_DEVICE] and stable.changed == ["@b:localhost"] and stable.left == []
    assert stable.one_time_keys == {"@sk_bob:localhost": {"D": {"signed_curve25519": 3}}}
    assert stable.fallback_keys == {"@sk_bob:localhost": {"D": []}}
    # Synapse names the counts both ways; malformed parts are left out, never fatal
    assert device_traffic({"org.matrix.msc3202.device_one_time_keys_count": {"@a:b": {"D": {"x": 1}}}}).one_time_keys
    assert not device_traffic({"to_device": "nope", "device_lists": [], "device_one_time_keys_count": 5})
    assert not device_traffic({})


def test_a_reused_transaction_id_with_new_to_device_messages_is_a_new_transaction():
    quiet = transaction_key("1", [])
    assert transaction_key("1", [], DeviceTraffic()) == quiet  # keys of plain transactions are unchanged
    one = transaction_key("1", [], DeviceTraffic(to_device=[TO_DEVICE]))
    other = transaction_key("1", [], DeviceTraffic(to_device=[{**TO_DEVICE, "to_device_id": "OTHER"}]))
    assert len({quiet, one, other}) == 3


async def test_the_appservice_hands_the_crypto_fields_on_with_the_events():
    seen: list[Transaction] = []

    async def on_transaction(transaction):
        seen.append(transaction)

    async with serving(on_transaction) as client:
        body = {
            "events": [{"event_id": "$a", "type": "m.room.message"}],
            "de.sorunome.msc2409.ephemeral": [{"type": "m.typing"}],
            "de.sorunome.msc2409.to_device": [TO_DEVICE],
            "org.matrix.msc3202.device_lists": {"changed": ["@owner:localhost"], "left": []},
            "org.matrix.msc3202.device_one_time_keys_count": {
                "@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 50}}
            },
        }
        response = await client.put("/_matrix/app/v1/transactions/9", json=body, headers=AUTH)
        assert response.status == 200
        only_keys = {"de.sorunome.msc2409.to_device": [TO_DEVICE]}  # a transaction of to-device alone
        response = await client.put("/_matrix/app/v1/transactions/10", json=only_keys, headers=AUTH)
        assert response.status == 200
    first, second = seen
    assert first.txn_id == "9" and [e["event_id"] for e in first.events] == ["$a"]
    assert first.ephemeral == [{"type": "m.typing"}]
    assert first.device.to_device == [TO_DEVICE] and first.device.changed == ["@owner:localhost"]
    assert first.device.one_time_keys == {"@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 50}}}
    assert second.events == [] and second.device.to_device == [TO_DEVICE]


async def _nothing_to_say(room_id):
    pass


class Recording(Encryption):
    def __init__(self, order):
        super().__init__(_nothing_to_say, lambda user_id: False)
        self.order = order

    async def device_traffic(self, traffic):
        self.order.append(("keys", len(traffic.to_device)))

    async def room_encrypted(self, room_id):
        self.order.append(("room encrypted", room_id))

    async def encrypted_event(self, event, dispatcher):
        self.order.append(("encrypted", event["event_id"]))
        plain = {**event, "type": "m.room.message", "content": {"msgtype": "m.text", "body": "decrypted"}}
        await dispatcher.decrypted(plain)


class Config:
    """What the dispatcher reads of the config."""

    bot_user_id = "@sidekicks:localhost"
    owners = ("@owner:localhost",)

    @staticmethod
    def agent_for_user_id(user_id):
        return "alice" if user_id == "@sk_alice:localhost" else None


async def test_the_dispatcher_gives_keys_first_then_events_and_decrypted_events_go_round_again():
    order: list = []
    dispatcher = owned_dispatcher()
    dispatcher.encryption = Recording(order)

    async def message(event, room_id, sender, content):
        order.append(("message", event["event_id"], content["body"]))

    dispatcher._handlers["m.room.message"] = message
    events = [
        {
            "event_id": "$1",
            "type": "m.room.encrypted",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "content": {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "…"},
        },
        {
            "event_id": "$2",
            "type": "m.room.message",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "content": {"msgtype": "m.text", "body": "plain"},
        },
        {
            "event_id": "$3",
            "type": "m.room.message",
            "room_id": "!r",
            "sender": "@sk_alice:localhost",
            "content": {"msgtype": "m.text", "body": "our own answer"},
        },
        {
            "event_id": "$4",
            "type": "m.room.encryption",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "state_key": "",
            "content": {"algorithm": "m.megolm.v1.aes-sha2"},
        },
        {
            "event_id": "$5",
            "type": "m.room.message",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "content": "not an object",
        },
        # a timeline event of that type, or a state event with another key, is not the room's state
        {
            "event_id": "$6",
            "type": "m.room.encryption",
            "room_id": "!plain",
            "sender": "@owner:localhost",
            "content": {"algorithm": "m.megolm.v1.aes-sha2"},
        },
        {
            "event_id": "$7",
            "type": "m.room.encryption",
            "room_id": "!plain",
            "sender": "@owner:localhost",
            "state_key": "x",
            "content": {"algorithm": "m.megolm.v1.aes-sha2"},
        },
    ]
    await dispatcher.transaction(Transaction("1", events, [], DeviceTraffic(to_device=[TO_DEVICE])))
    assert order == [
        ("keys", 1),
        ("encrypted", "$1"),
        ("message", "$1", "decrypted"),
        ("message", "$2", "plain"),
        ("room encrypted", "!r"),
    ]
    # a "decrypted" event that is still encrypted does not go round again
    order.clear()
    await dispatcher.decrypted(events[0])
    assert order == []


# ---- nothing lost, nothing twice -------------------------------------------------------------


def owned_dispatcher() -> Dispatcher:
    """A dispatcher with a real store, for what it records; handlers that do nothing."""
    from bridge.outage import StoreOutage
    from store import Store
    from store.offloop import OffLoop

    async def nothing(event, room_id, sender, content):
        pass

    kinds = ("m.room.member", *OWNER_KINDS)
    is_owner = Config.owners.__contains__
    return Dispatcher(
        Config,
        OffLoop(Store.open(":memory:")),
        {kind: nothing for kind in kinds},
        StoreOutage(),
        Encryption(_nothing_to_say, is_owner),
    )


def owner_message(event_id: str, body: str = "hi") -> dict:
    return {
        "event_id": event_id,
        "type": "m.room.message",
        "room_id": "!r",
        "sender": "@owner:localhost",
        "content": {"msgtype": "m.text", "body": body},
    }


def dispatcher_with(handled: list, fail: dict) -> Dispatcher:
    """A dispatcher whose message handler records bodies and raises fail[event_id] once."""
    dispatcher = owned_dispatcher()

    async def message(event, room_id, sender, content):
        error = fail.pop(event["event_id"], None)
        if error is not None:
            raise error
        handled.append(content["body"])

    dispatcher._handlers["m.room.message"] = message
    return dispatcher


async def test_an_event_delivered_again_is_not_handled_again_whatever_its_kind():
    handled: list = []
    dispatcher = dispatcher_with(handled, {})
    counts: dict = {}

    def counting(kind):
        async def handler(event, room_id, sender, content):
            counts[kind] = counts.get(kind, 0) + 1

        return handler

    for kind in ("m.room.member", "m.reaction", "m.room.redaction", "m.room.name"):
        dispatcher._handlers[kind] = counting(kind)
    events = [
        owner_message("$cmd", "!new test alice"),
        owner_message("$num", "1"),
        {
            "event_id": "$re",
            "type": "m.reaction",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$x", "key": "🛑"}},
        },
        {
            "event_id": "$rd",
            "type": "m.room.redaction",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "content": {"redacts": "$x"},
        },
        {
            "event_id": "$in",
            "type": "m.room.member",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "state_key": "@sk_alice:localhost",
            "content": {"membership": "invite"},
        },
        {
            "event_id": "$nm",
            "type": "m.room.name",
            "room_id": "!r",
            "sender": "@owner:localhost",
            "content": {"name": "x"},
        },
    ]
    for txn in ("1", "1-again-after-a-restart"):
        await dispatcher.transaction(Transaction(txn, events))
    assert handled == ["!new test alice", "1"]
    assert counts == {"m.reaction": 1, "m.room.redaction": 1, "m.room.member": 1, "m.room.name": 1}
    # a catch-up of the same message is the same event
    await dispatcher.event(owner_message("$cmd", "!new test alice"))
    assert handled == ["!new test alice", "1"]


async def test_a_handler_that_recorded_its_event_itself_is_not_recorded_again():
    """An owner message taken with its turns is recorded as handled in that write (store/turns
    .py `take`): the dispatcher writes nothing more for it; any other is recorded by the
    dispatcher (the database thread writes it before the next call)."""
    dispatcher = owned_dispatcher()
    store = dispatcher.db.target
    marked: list = []
    real_mark = store.mark_txn

    def mark(key):
        marked.append(key)
        real_mark(key)

    store.mark_txn = mark

    async def taking(event, room_id, sender, content):
        real_mark(keys.handled_event(event["event_id"]))  # as take does, in its own write
        return True

    async def other(event, room_id, sender, content):
        return None

    dispatcher._handlers["m.room.message"] = taking
    dispatcher._handlers["m.room.name"] = other
    await dispatcher.transaction(
        Transaction(
            "1",
            [
                owner_message("$taken", "hi"),
                {
                    "event_id": "$nm",
                    "type": "m.room.name",
                    "room_id": "!r",
                    "sender": "@owner:localhost",
                    "content": {"name": "x"},
                },
            ],
        )
    )
    assert await dispatcher.db.txn_seen(keys.handled_event("$nm"))  # written before this check
    assert marked == [keys.handled_event("$nm")]
    assert await dispatcher.db.txn_seen(keys.handled_event("$taken"))


async def test_a_transaction_not_handled_in_full_is_refused_and_comes_again_without_repeats():
    import pytest

    from bridge.matrix.appservice import TransactionRefused
    from store import StoreError

    handled: list = []
    dispatcher = dispatcher_with(handled, {"$2": StoreError("add_message failed: disk I/O error")})
    events = [owner_message("$1", "one"), owner_message("$2", "two"), owner_message("$3", "three")]
    with pytest.raises(TransactionRefused, match="disk I/O error"):
        await dispatcher.transaction(Transaction("7", events))
    assert handled == ["one"]  # it stops at the failure: the order is kept
    await dispatcher.transaction(Transaction("7", events))  # the homeserver sends it again
    assert handled == ["one", "two", "three"]


async def test_an_event_that_cannot_be_handled_is_skipped_not_retried_forever(caplog):
    import pytest

    from bridge.matrix.appservice import TransactionRefused
    from bridge.matrix.client import MatrixError

    handled: list = []
    dispatcher = dispatcher_with(
        handled,
        {
            "$bad": KeyError("unexpected"),
            "$refused": MatrixError("joining: M_FORBIDDEN no", 403),
            "$busy": MatrixError("sending: M_UNKNOWN busy", 502),
        },
    )
    events = [owner_message("$bad", "bad"), owner_message("$refused", "refused"), owner_message("$ok", "ok")]
    await dispatcher.transaction(Transaction("8", events))  # acknowledged
    assert handled == ["ok"]
    assert any("$bad could not be handled; skipped" in r.getMessage() for r in caplog.records)
    await dispatcher.transaction(Transaction("8-again", events))
    assert handled == ["ok"]  # the skipped ones count as handled
    with pytest.raises(TransactionRefused):  # a 5xx is the homeserver's trouble: it comes again
        await dispatcher.transaction(Transaction("9", [owner_message("$busy", "busy")]))
    await dispatcher.transaction(Transaction("9", [owner_message("$busy", "busy")]))
    assert handled == ["ok", "busy"]


async def test_a_decrypted_event_is_recorded_as_itself_so_a_late_key_still_gets_it_handled():
    handled: list = []
    dispatcher = dispatcher_with(handled, {})
    waiting: list = []

    class LateKeys(Encryption):
        async def encrypted_event(self, event, dispatcher):
            waiting.append(event)  # no key yet: decrypted later

    dispatcher.encryption = LateKeys(_nothing_to_say, Config.owners.__contains__)
    encrypted = {
        "event_id": "$e",
        "type": "m.room.encrypted",
        "room_id": "!r",
        "sender": "@owner:localhost",
        "content": {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "…"},
    }
    await dispatcher.transaction(Transaction("1", [encrypted]))
    plain = {**encrypted, "type": "m.room.message", "content": {"msgtype": "m.text", "body": "secret"}}
    await dispatcher.decrypted(plain)  # the key came
    await dispatcher.decrypted(plain)  # and again (a retried transaction decrypted again)
    assert handled == ["secret"] and len(waiting) == 1


async def test_the_appservice_refuses_a_transaction_it_could_not_handle_and_takes_it_again():
    from bridge.matrix.appservice import TransactionRefused

    tries: list = []

    async def on_transaction(transaction):
        tries.append(transaction.txn_id)
        if len(tries) == 1:
            raise TransactionRefused("transaction 5 not handled: the database is down")

    recorded: set = set()  # the transaction keys the store holds
    async with serving(on_transaction, recorded) as client:
        body = {"events": [{"event_id": "$a", "type": "m.room.encrypted"}]}  # recorded as a transaction
        first = await client.put("/_matrix/app/v1/transactions/5", json=body, headers=AUTH)
        assert first.status == 500 and (await first.json())["errcode"] == "M_UNKNOWN"
        assert recorded == set()  # not recorded: it is not done
        second = await client.put("/_matrix/app/v1/transactions/5", json=body, headers=AUTH)
        assert second.status == 200 and len(recorded) == 1
        third = await client.put("/_matrix/app/v1/transactions/5", json=body, headers=AUTH)
        assert third.status == 200 and tries == ["5", "5"]


async def test_every_kind_with_a_handler_reaches_it_for_the_owner_and_never_for_a_stranger():
    # stickers and polls go to the message handler (bridge/matrix/media.py): a kind given a handler but
    # not let through would be dropped silently
    dispatcher = owned_dispatcher()
    reached: list = []

    def recording(kind):
        async def handler(event, room_id, sender, content):
            reached.append((kind, sender))

        return handler

    kinds = [kind for kind in dispatcher._handlers if kind != "m.room.member"]
    assert {"m.sticker", "m.poll.start", "org.matrix.msc3381.poll.start"} <= set(kinds)
    for kind in kinds:
        dispatcher._handlers[kind] = recording(kind)
    for n, sender in enumerate(("@owner:localhost", "@stranger:localhost")):
        await dispatcher.transaction(
            Transaction(
                str(n),
                [
                    {
                        "event_id": f"${kind}{n}",
                        "type": kind,
                        "room_id": "!r",
                        "sender": sender,
                        "content": {"body": "x"},
                    }
                    for kind in kinds
                ],
            )
        )
    assert reached == [(kind, "@owner:localhost") for kind in kinds]


async def test_a_database_taken_by_another_bridge_halts_this_one_with_one_line():
    from bridge.outage import StoreOutage
    from store import StoreLockLost, StoreUnavailable

    halted: list = []
    outage = StoreOutage(halt=halted.append)
    outage.hit(StoreLockLost("pid 4242 holds it"), {"room_id": "!r"})
    assert len(halted) == 1 and "another bridge took the database" in halted[0] and "\n" not in halted[0]
    assert outage._task is None and outage.outages == 0  # nothing to wait for: this bridge stops
    outage.hit(ValueError("not the store"), {"room_id": "!r"})
    assert outage._task is None  # only the store's unavailability is watched
    assert issubclass(StoreLockLost, Exception) and not issubclass(StoreLockLost, StoreUnavailable)


def test_a_tombstone_points_to_its_replacement_only_when_it_is_one():
    from bridge.channels.events.upgrade import replacement_of

    event = {"type": "m.room.tombstone", "state_key": "", "content": {"replacement_room": "!new:hs"}}
    assert replacement_of(event, "!old:hs") == "!new:hs"
    assert replacement_of({**event, "state_key": "x"}, "!old:hs") is None  # not the room's state
    assert replacement_of({**event, "content": {"replacement_room": "!old:hs"}}, "!old:hs") is None
    assert replacement_of({**event, "content": {"replacement_room": "#alias:hs"}}, "!old:hs") is None
    assert replacement_of({**event, "content": {"replacement_room": 7}}, "!old:hs") is None
    assert replacement_of({**event, "content": "x"}, "!old:hs") is None


async def test_an_event_that_comes_two_ways_at_once_is_handled_once():
    # read back after the homeserver was away while its transaction is being handled: the
    # second waits for the first and finds it handled; one the first could not handle (refused,
    # transient) is handled by the second
    import asyncio

    from bridge.matrix.client import MatrixError

    gate, handled = asyncio.Event(), []
    dispatcher = owned_dispatcher()

    async def message(event, room_id, sender, content):
        handled.append(event["event_id"])
        await gate.wait()
        if content["body"] == "refused":
            raise MatrixError("the homeserver is busy", 502)

    dispatcher._handlers["m.room.message"] = message
    first = asyncio.ensure_future(dispatcher.event(owner_message("$cmd", "!help")))
    second = asyncio.ensure_future(dispatcher.event(owner_message("$cmd", "!help")))
    while not handled:
        await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, second)
    assert handled == ["$cmd"]
    gate.clear()
    first = asyncio.ensure_future(dispatcher.event(owner_message("$busy", "refused")))
    second = asyncio.ensure_future(dispatcher.event(owner_message("$busy", "refused")))
    while not handled.count("$busy"):
        await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert handled.count("$busy") == 2 and all(isinstance(r, MatrixError) for r in results)
