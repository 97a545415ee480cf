"""Unit tests of bridge/e2ee that need no homeserver: cross-signing, the device's files."""

import json
import stat

import pytest

from bridge.e2ee.crosssign import CrossSigning, canonical, verify
from bridge.e2ee.crypto import EncryptingOutgoing


def test_vodozemac_is_what_nio_encrypts_with():
    import nio.crypto

    assert nio.crypto.ENCRYPTION_ENABLED


def test_cross_signing_keys_sign_each_other_and_the_device():
    cross = CrossSigning("@sk_alice:localhost")
    body = cross.upload_body()
    master = body["master_key"]
    ((master_id, master_pub),) = master["keys"].items()
    assert master_id == f"ed25519:{master_pub}" and master["usage"] == ["master"]
    for usage in ("self_signing_key", "user_signing_key"):
        key = body[usage]
        assert verify(key, master_pub, key["signatures"]["@sk_alice:localhost"][master_id])
    device = {
        "user_id": "@sk_alice:localhost",
        "device_id": "DEV",
        "algorithms": ["m.megolm.v1.aes-sha2"],
        "keys": {"ed25519:DEV": "x"},
        "signatures": {"@sk_alice:localhost": {"ed25519:DEV": "own"}},
        "unsigned": {"device_display_name": "Sidekicks bridge"},
    }
    signed = cross.sign_device(device)
    (ssk_pub,) = body["self_signing_key"]["keys"].values()
    sigs = signed["signatures"]["@sk_alice:localhost"]
    assert sigs["ed25519:DEV"] == "own"  # the device's own signature stays
    assert verify(device, ssk_pub, sigs[f"ed25519:{ssk_pub}"])
    assert not verify({**device, "device_id": "OTHER"}, ssk_pub, sigs[f"ed25519:{ssk_pub}"])
    # the same seeds are the same keys (kept across starts)
    again = CrossSigning("@sk_alice:localhost", cross.seeds())
    assert again.upload_body()["master_key"]["keys"] == master["keys"]


def test_canonical_json_is_sorted_compact_and_unsigned():
    assert canonical({"b": 1, "a": "é", "signatures": {}, "unsigned": {}}) == '{"a":"é","b":1}'.encode()


def test_rooms_the_bridge_makes_are_encrypted_but_not_spaces():
    class E2EE:
        class config:
            bot_user_id = "@sidekicks:localhost"

        bot_reads = False

    outgoing = EncryptingOutgoing(E2EE)
    room = outgoing.new_room(
        "@sidekicks:localhost", {"name": "x", "initial_state": [{"type": "m.space.parent", "state_key": "!s"}]}
    )
    assert [s["type"] for s in room["initial_state"]] == ["m.space.parent", "m.room.encryption"]
    assert room["initial_state"][1]["content"] == {"algorithm": "m.megolm.v1.aes-sha2"}
    space = {"creation_content": {"type": "m.space"}}
    assert outgoing.new_room("@sidekicks:localhost", space) is space
    dm = {"is_direct": True, "preset": "trusted_private_chat"}
    assert outgoing.new_room("@sidekicks:localhost", dm) is dm  # the bot's DM: it reads nothing
    assert outgoing.new_room("@sk_alice:localhost", dm)["initial_state"][0]["type"] == "m.room.encryption"
    E2EE.bot_reads = True  # the homeserver sends the bot's crypto traffic: its DM is encrypted too
    assert outgoing.new_room("@sidekicks:localhost", dm)["initial_state"][0]["type"] == "m.room.encryption"


def test_the_bot_reads_where_the_homeserver_sends_its_crypto_traffic(tmp_path):
    import yaml

    import config
    from bridge.local.homeserver import Homeserver
    from config.registration import build

    path = tmp_path / "config.yaml"
    agents = {"a": {"command": ["x"]}}
    path.write_text(yaml.safe_dump({"owner": "@me:localhost", "agents": agents}))
    embedded = config.load(path)
    assert embedded.homeserver_embedded and embedded.device_traffic  # configured by the bridge
    for value, expected in ((None, False), ("on", True), ("off", False), (True, True)):
        hs = {"url": "http://127.0.0.1:8008"} | ({} if value is None else {"device_traffic": value})
        path.write_text(yaml.safe_dump({"owner": "@me:localhost", "homeserver": hs, "agents": agents}))
        assert config.load(path).device_traffic is expected
    path.write_text(
        yaml.safe_dump({"owner": "@me:localhost", "agents": agents, "homeserver": {"device_traffic": "maybe"}})
    )
    with pytest.raises(config.ConfigError, match="homeserver.device_traffic: must be on or off"):
        config.load(path)
    # what asks Synapse for it: the registration's keys and the homeserver's experimental features
    registration = yaml.safe_load(build(embedded).to_yaml())
    assert registration["de.sorunome.msc2409.push_ephemeral"] is True
    assert registration["org.matrix.msc3202"] is True and registration["receive_ephemeral"] is True
    body = Homeserver(tmp_path / "hs")._config({}, tmp_path / "log.yaml")
    assert body["experimental_features"] == {
        "msc2409_to_device_messages_enabled": True,
        "msc3202_transaction_extensions": True,
    }


@pytest.mark.parametrize("value, expected", [("on", True), ("off", False), (True, True), (False, False)])
def test_encryption_setting(tmp_path, value, expected):
    import yaml

    import config

    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump({"owner": "@me:localhost", "encryption": value, "agents": {"a": {"command": ["x"]}}})
    )
    assert config.load(path).encryption is expected
    path.write_text(yaml.safe_dump({"owner": "@me:localhost", "agents": {"a": {"command": ["x"]}}}))
    assert config.load(path).encryption is True  # the default
    path.write_text(
        yaml.safe_dump({"owner": "@me:localhost", "encryption": "maybe", "agents": {"a": {"command": ["x"]}}})
    )
    with pytest.raises(config.ConfigError, match="encryption: must be on or off"):
        config.load(path)


@pytest.mark.parametrize("encryption", [True, False])
def test_the_embedded_homeserver_tells_element_to_encrypt_new_rooms_when_the_bridge_reads_them(tmp_path, encryption):
    from bridge.local.homeserver import Homeserver

    server = Homeserver(tmp_path / "hs", encryption=encryption)
    body = server._config({}, tmp_path / "log.yaml")
    assert body["extra_well_known_client_content"]["io.element.e2ee"] == {"default": encryption}


def test_the_device_file_is_private(tmp_path):
    from bridge.e2ee.device import Device

    device = Device("@sk_alice:localhost", "http://127.0.0.1:1", "as", tmp_path / "sk_alice")
    device.folder.mkdir()
    device.state = {"device_id": "D", "access_token": "secret"}
    device._save()
    assert stat.S_IMODE((device.folder / "device.json").stat().st_mode) == 0o600
    assert json.loads((device.folder / "device.json").read_text())["access_token"] == "secret"
    # unreadable: a new device is made, and why is kept for the owner's notice
    (device.folder / "device.json").write_text("{not json")
    assert device._load() == {} and "could not be read" in device.renewed


@pytest.mark.parametrize("bot_reads", [True, False])
async def test_only_the_bots_share_of_a_transactions_crypto_traffic_reaches_its_device(bot_reads):
    from types import SimpleNamespace

    from bridge.e2ee.crypto import E2EE
    from bridge.matrix.appservice import DeviceTraffic

    class Store:
        e2ee = SimpleNamespace(encrypted_rooms=lambda: [], waiting=lambda: [])

    bot, puppet = "@sidekicks:localhost", "@sk_alice:localhost"
    config = SimpleNamespace(device_traffic=bot_reads, bot_user_id=bot)
    e2ee = E2EE(config, SimpleNamespace(target=Store()), "as-token")
    got = []

    class Fake:
        nio = object()

        def __init__(self, device_id, syncs):
            self.device_id, self.syncs = device_id, syncs

        async def receive_traffic(self, *args):
            got.append((self.device_id, args))

    e2ee.devices = {bot: Fake("BOTDEV", False), puppet: Fake("ALICEDEV", True)}
    key = {"type": "m.room.encrypted", "sender": "@owner:localhost", "content": {}}
    traffic = DeviceTraffic(
        to_device=[
            {**key, "to_user_id": bot, "to_device_id": "BOTDEV"},
            {**key, "to_user_id": bot, "to_device_id": "OLDDEV"},  # another device of the bot
            {**key, "to_user_id": puppet, "to_device_id": "ALICEDEV"},
        ],  # the puppet's /sync has it
        changed=["@owner:localhost"],
        one_time_keys={bot: {"BOTDEV": {"signed_curve25519": 3}}, puppet: {"ALICEDEV": {"signed_curve25519": 1}}},
        fallback_keys={bot: {"BOTDEV": []}},
    )
    await e2ee.device_traffic(traffic)
    if not bot_reads:
        assert got == []  # a homeserver not said to send it: nothing changes
        return
    ((device_id, (to_device, counts, fallback, changed, left)),) = got
    assert device_id == "BOTDEV" and [m["to_device_id"] for m in to_device] == ["BOTDEV"]
    assert counts == {"signed_curve25519": 3} and fallback == [] and changed == ["@owner:localhost"]
    await e2ee.device_traffic(DeviceTraffic(to_device=[{**key, "to_user_id": puppet, "to_device_id": "ALICEDEV"}]))
    assert len(got) == 1  # only the puppet's: not handed on
