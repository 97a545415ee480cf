"""The way in: the appservice's crypto fields (MSC2409 / MSC3202) reach the dispatcher's
encryption seam, before the transaction's events; events of every source pass the dispatcher."""
from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from bridge.appservice import AppserviceServer, DeviceTraffic, Transaction, device_traffic, transaction_key
from bridge.dispatch import Dispatcher, Encryption

TOKEN = "hs-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

TO_DEVICE = {"type": "m.room.encrypted", "sender": "@owner:localhost", "to_user_id": "@sk_alice:localhost",
             "to_device_id": "ALICEDEV", "content": {"algorithm": "m.olm.v1.curve25519-aes-sha2", "ciphertext": {}}}


def test_the_crypto_fields_of_a_transaction_are_parsed_under_either_name():
    unstable = device_traffic({
        "de.sorunome.msc2409.to_device": [TO_DEVICE, "junk"],
        "org.matrix.msc3202.device_lists": {"changed": ["@owner:localhost", 7], "left": ["@gone:localhost"]},
        "org.matrix.msc3202.device_one_time_key_counts": {
            "@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 20, "bad": "x"}}},
        "org.matrix.msc3202.device_unused_fallback_key_types": {
            "@sk_alice:localhost": {"ALICEDEV": ["signed_curve25519"]}, "@bad:localhost": []},
    })
    assert unstable.to_device == [TO_DEVICE]
    assert unstable.changed == ["@owner:localhost"] and unstable.left == ["@gone:localhost"]
    assert unstable.one_time_keys == {"@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 20}}}
    assert unstable.fallback_keys == {"@sk_alice:localhost": {"ALICEDEV": ["signed_curve25519"]}}
    stable = device_traffic({"to_device": [TO_DEVICE], "device_lists": {"changed": ["@b:localhost"]},
                             "device_one_time_keys_count": {"@sk_bob:localhost": {"D": {"signed_curve25519": 3}}},
                             "device_unused_fallback_key_types": {"@sk_bob:localhost": {"D": []}}})
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

    async def on_user(user_id):
        return False

    keys: set = set()
    server = AppserviceServer(TOKEN, on_transaction, on_user, keys.__contains__, keys.add)
    client = TestClient(TestServer(server.app))
    await client.start_server()
    try:
        body = {"events": [{"event_id": "$a", "type": "m.room.message"}],
                "de.sorunome.msc2409.ephemeral": [{"type": "m.typing"}],
                "de.sorunome.msc2409.to_device": [TO_DEVICE],
                "org.matrix.msc3202.device_lists": {"changed": ["@owner:localhost"], "left": []},
                "org.matrix.msc3202.device_one_time_keys_count": {"@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 50}}}}
        response = await client.put("/_matrix/app/v1/transactions/9", json=body, headers=AUTH)
        assert response.status == 200
        only_keys = {"de.sorunome.msc2409.to_device": [TO_DEVICE]}  # a transaction of to-device alone
        response = await client.put("/_matrix/app/v1/transactions/10", json=only_keys, headers=AUTH)
        assert response.status == 200
    finally:
        await client.close()
    first, second = seen
    assert first.txn_id == "9" and [e["event_id"] for e in first.events] == ["$a"]
    assert first.ephemeral == [{"type": "m.typing"}]
    assert first.device.to_device == [TO_DEVICE] and first.device.changed == ["@owner:localhost"]
    assert first.device.one_time_keys == {"@sk_alice:localhost": {"ALICEDEV": {"signed_curve25519": 50}}}
    assert second.events == [] and second.device.to_device == [TO_DEVICE]


class Recording(Encryption):
    def __init__(self, inbound, order):
        super().__init__(inbound)
        self.order = order

    async def device_traffic(self, traffic):
        self.order.append(("keys", len(traffic.to_device)))

    async def room_encrypted(self, room_id):
        self.order.append(("room encrypted", room_id))

    async def encrypted_event(self, event, dispatcher):
        self.order.append(("encrypted", event["event_id"]))
        plain = {**event, "type": "m.room.message", "content": {"msgtype": "m.text", "body": "decrypted"}}
        await dispatcher.decrypted(plain)


class Bridgeless:
    """Just what the dispatcher reads of a bridge: its config."""

    class config:
        bot_user_id = "@sidekicks:localhost"

        @staticmethod
        def agent_for_user_id(user_id):
            return "alice" if user_id == "@sk_alice:localhost" else None


async def test_the_dispatcher_gives_keys_first_then_events_and_decrypted_events_go_round_again():
    order: list = []
    dispatcher = Dispatcher(Bridgeless())
    dispatcher.encryption = Recording(dispatcher.inbound, order)

    async def message(event, room_id, sender, content):
        order.append(("message", event["event_id"], content["body"]))

    dispatcher._handlers["m.room.message"] = message
    events = [
        {"event_id": "$1", "type": "m.room.encrypted", "room_id": "!r", "sender": "@owner:localhost",
         "content": {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "…"}},
        {"event_id": "$2", "type": "m.room.message", "room_id": "!r", "sender": "@owner:localhost",
         "content": {"msgtype": "m.text", "body": "plain"}},
        {"event_id": "$3", "type": "m.room.message", "room_id": "!r", "sender": "@sk_alice:localhost",
         "content": {"msgtype": "m.text", "body": "our own answer"}},
        {"event_id": "$4", "type": "m.room.encryption", "room_id": "!r", "sender": "@owner:localhost",
         "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}},
        {"event_id": "$5", "type": "m.room.message", "room_id": "!r", "sender": "@owner:localhost",
         "content": "not an object"},
    ]
    await dispatcher.transaction(Transaction("1", events, [], DeviceTraffic(to_device=[TO_DEVICE])))
    assert order == [("keys", 1), ("encrypted", "$1"), ("message", "$1", "decrypted"),
                     ("message", "$2", "plain"), ("room encrypted", "!r")]
    # a "decrypted" event that is still encrypted does not go round again
    order.clear()
    await dispatcher.decrypted(events[0])
    assert order == []

