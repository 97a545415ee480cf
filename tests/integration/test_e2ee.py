"""Encrypted rooms end to end: the real Synapse, the real bridge with `encryption: on`,
and an owner who encrypts — matrix-nio with `e2e`, its own device and crypto store, as Element's
users do by default.

Every puppet event the owner receives in an encrypted room must have come encrypted (the
`Seen` record keeps, per event id, whether the owner's client decrypted it), and the owner reads
the answers by decrypting them.
"""

from __future__ import annotations

import stat
from contextlib import asynccontextmanager

import aiohttp
import nio
from bridge_harness import agent, answers_in
from matrix_helpers import WHOLE_TIMELINE, caught_up, events_in, logged_in, login, open_dm, sync_until, wait_joined

from bridge.e2ee.crosssign import verify

MEGOLM = "m.megolm.v1.aes-sha2"
ALICE = "@sk_alice:localhost"
BOB = "@sk_bob:localhost"
ENCRYPTED = [{"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}]


def unreadable(seen: Seen, room_id: str) -> list[str]:
    return [event_id for room, event_id in seen.undecryptable if room == room_id]


class Seen:
    """Per event id of the bridge's identities: whether it came encrypted, and decrypted fine."""

    def __init__(self, client: nio.AsyncClient):
        self.encrypted: dict[str, bool] = {}
        self.undecryptable: list[tuple[str, str]] = []  # (room, event): a new client of the
        # owner sees the rooms of earlier tests too, whose events it has no keys for
        client.add_event_callback(self._on_event, (nio.Event, nio.BadEvent, nio.UnknownBadEvent))

    def _on_event(self, room, event) -> None:
        source = getattr(event, "source", None) or {}
        sender = source.get("sender", "")
        if not (sender.startswith("@sk_") or sender == "@sidekicks:localhost"):
            return
        if isinstance(event, nio.MegolmEvent):
            self.undecryptable.append((room.room_id, source.get("event_id")))
        if source.get("type") in ("m.room.member", "m.room.encryption"):
            return  # state stays in the clear
        self.encrypted[source.get("event_id")] = bool(getattr(event, "decrypted", False))


async def e2e_login(hs, user_id: str, password: str, name: str = "owner-e2e") -> tuple[nio.AsyncClient, Seen]:
    client = await login(hs, user_id, password, device_name=name, encryption=True)
    return client, Seen(client)


@asynccontextmanager
async def e2e_owner(hs, name: str = "owner-e2e"):
    """`async with e2e_owner(homeserver) as (owner, seen)`: the owner logged in with end-to-end
    encryption (a device and a crypto store of its own, `e2e_login`) at that point of the test —
    after its bridge is up, so the owner's device is new to it —, closed at the end in all cases."""
    async with logged_in(hs, hs.owner_id, hs.owner_password, device_name=name, encryption=True) as client:
        yield client, Seen(client)


async def open_encrypted_dm(owner: nio.AsyncClient, puppet_id: str, encrypted: bool = True) -> str:
    return await open_dm(owner, puppet_id, initial_state=ENCRYPTED if encrypted else [])


async def say(owner: nio.AsyncClient, room_id: str, text: str, **extra) -> str:
    await owner.sync(timeout=0, sync_filter=WHOLE_TIMELINE)  # the puppets' devices, before the room key goes out
    if owner.should_query_keys:  # as a client's sync loop does (nio's room_send does not)
        assert isinstance(await owner.keys_query(), nio.KeysQueryResponse)
    response = await owner.room_send(
        room_id, "m.room.message", {"msgtype": "m.text", "body": text, **extra}, ignore_unverified_devices=True
    )
    assert isinstance(response, nio.RoomSendResponse), response
    return response.event_id


async def final_answers(owner, room_id, puppet_id, count: int, done=lambda a: True):
    def finished():
        answers = answers_in(events_in(owner, room_id), puppet_id)
        return len(answers) >= count and all(
            "getting ready" not in a["body"] and not a["body"].startswith(("💭", "✍️", "🔧")) and done(a)
            for a in answers[:count]
        )

    finished.__qualname__ = f"{count} final answer(s) of {puppet_id}"
    await sync_until(owner, finished)
    return answers_in(events_in(owner, room_id), puppet_id)


def puppet_events(owner, room_id, sender) -> list[dict]:
    return [
        e
        for e in events_in(owner, room_id)
        if e.get("sender") == sender and e.get("type") not in ("m.room.member", "m.room.encryption")
    ]


def all_encrypted(seen: Seen, owner, room_id, sender) -> None:
    events = puppet_events(owner, room_id, sender)
    assert events, "no event of the puppet"
    plain = [e for e in events if not seen.encrypted.get(e["event_id"])]
    assert not plain, f"sent in the clear in an encrypted room: {plain}"


async def test_encrypted_dm_is_answered_encrypted_with_streaming_edits_and_survives_a_restart(
    homeserver, bridge_factory, tmp_path
):
    answer = "Hello **there**, owner. Here is a longer answer in parts."
    agents = {"alice": agent("--answer", answer, "--chunks", "5", "--delay", "0.05", title="Alice")}
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder, encryption="on")
    async with e2e_owner(homeserver) as (owner, seen):
        room_id = await open_encrypted_dm(owner, ALICE)
        await say(owner, room_id, "hello")
        answers = await final_answers(owner, room_id, ALICE, 1, done=lambda a: a["body"] == answer)
        assert answers[0]["edits"] >= 2 and "<strong>there</strong>" in answers[0]["html"]
        all_encrypted(seen, owner, room_id, ALICE)
        assert not unreadable(seen, room_id)
        # no "cannot read encrypted messages" notice: it reads them
        assert not [
            e for e in puppet_events(owner, room_id, ALICE) if "cannot read" in (e.get("content") or {}).get("body", "")
        ]
        # the store keeps the plain text, as in plain rooms
        channel = running.store.channel_by_room(room_id)
        await running.idle()
        assert [m.text for m in running.store.last_messages(channel.id, 10)] == ["hello", answer]

        # the device, its token and its crypto store are in the data folder, private
        device_dir = folder / "data" / "e2ee" / "sk_alice"
        device_file = device_dir / "device.json"
        assert stat.S_IMODE(device_file.stat().st_mode) == 0o600
        assert stat.S_IMODE((device_dir / "crypto.db").stat().st_mode) == 0o600
        assert stat.S_IMODE(device_dir.stat().st_mode) == 0o700
        device_id = running.bridge.e2ee.devices[ALICE].device_id

        # a restart between two messages: the same device, the next message read and answered
        await running.stop()
        running = await bridge_factory(agents, folder=folder, encryption="on")
        assert running.bridge.e2ee.devices[ALICE].device_id == device_id
        await say(owner, room_id, "again")
        answers = await final_answers(owner, room_id, ALICE, 2, done=lambda a: a["body"] == answer)
        assert len(answers) == 2
        all_encrypted(seen, owner, room_id, ALICE)
        assert not unreadable(seen, room_id)
        await running.idle()


async def test_puppet_device_is_signed_by_its_own_cross_signing_key(homeserver, bridge_factory):
    running = await bridge_factory({"alice": agent(title="Alice")}, encryption="on")
    async with e2e_owner(homeserver) as (owner, _):
        device_id = running.bridge.e2ee.devices[ALICE].device_id
        async with aiohttp.ClientSession() as http:
            async with http.post(
                f"{homeserver.url}/_matrix/client/v3/keys/query",
                headers={"Authorization": f"Bearer {owner.access_token}"},
                json={"device_keys": {ALICE: []}},
            ) as response:
                keys = await response.json()
        master = keys["master_keys"][ALICE]
        ssk = keys["self_signing_keys"][ALICE]
        (master_pub,) = master["keys"].values()
        (ssk_pub,) = ssk["keys"].values()
        assert verify(ssk, master_pub, ssk["signatures"][ALICE][f"ed25519:{master_pub}"])
        device = keys["device_keys"][ALICE][device_id]
        assert verify(device, ssk_pub, device["signatures"][ALICE][f"ed25519:{ssk_pub}"])
        # the bot too
        bot_device = running.bridge.e2ee.devices["@sidekicks:localhost"]
        assert bot_device.state.get("signed_device") == bot_device.device_id


async def test_a_room_that_turns_encrypted_mid_way_switches_without_a_restart(homeserver, bridge_factory):
    running = await bridge_factory({"alice": agent("--answer", "plain or not", title="Alice")}, encryption="on")
    async with e2e_owner(homeserver) as (owner, seen):
        room_id = await open_encrypted_dm(owner, ALICE, encrypted=False)
        await say(owner, room_id, "first, in the clear")
        await final_answers(owner, room_id, ALICE, 1)
        assert not any(seen.encrypted.values())  # a plain room: plain answers
        response = await owner.room_put_state(room_id, "m.room.encryption", {"algorithm": MEGOLM})
        assert isinstance(response, nio.RoomPutStateResponse), response
        await caught_up(owner, room_id)
        assert owner.rooms[room_id].encrypted
        second = await say(owner, room_id, "second, encrypted")
        await running.handled(second)
        answers = await final_answers(owner, room_id, ALICE, 2)
        assert answers[1]["body"] == "plain or not"
        assert seen.encrypted[answers[1]["event_id"]]
        later = [
            e
            for e in puppet_events(owner, room_id, ALICE)
            if e["origin_server_ts"]
            >= next(e2["origin_server_ts"] for e2 in events_in(owner, room_id) if e2.get("event_id") == second)
        ]
        assert later and all(seen.encrypted[e["event_id"]] for e in later)
        assert not unreadable(seen, room_id)


async def test_a_new_owner_device_reads_the_next_answer(homeserver, bridge_factory):
    await bridge_factory({"alice": agent("--answer", "for every device", title="Alice")}, encryption="on")
    owner, seen = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password)
    laptop = None
    try:
        room_id = await open_encrypted_dm(owner, ALICE)
        await say(owner, room_id, "one")
        await final_answers(owner, room_id, ALICE, 1)
        # the owner logs in on a new computer
        laptop, laptop_seen = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password, name="laptop")
        await laptop.sync(timeout=0)
        await say(owner, room_id, "two")
        await final_answers(laptop, room_id, ALICE, 1, done=lambda a: a["body"] == "for every device")
        answers = answers_in(events_in(laptop, room_id), ALICE)
        assert answers[-1]["body"] == "for every device"
        assert laptop_seen.encrypted[answers[-1]["event_id"]]
        await final_answers(owner, room_id, ALICE, 2)
        assert not unreadable(seen, room_id)
    finally:
        await owner.close()
        if laptop is not None:
            await laptop.close()


async def test_a_stranger_in_an_encrypted_room_is_ignored(homeserver, bridge_factory, tmp_path):
    log = tmp_path / "alice.log"
    running = await bridge_factory(
        {"alice": agent("--answer", "only for the owner", "--log", str(log), title="Alice")}, encryption="on"
    )
    owner, seen = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password)
    stranger, _ = await e2e_login(homeserver, homeserver.stranger_id, homeserver.stranger_password, "stranger")
    try:
        response = await owner.room_create(
            name="mixed", invite=[ALICE, homeserver.stranger_id], initial_state=ENCRYPTED
        )
        room_id = response.room_id
        await wait_joined(owner, room_id, ALICE)
        await stranger.sync(timeout=0)
        assert isinstance(await stranger.join(room_id), nio.JoinResponse)
        await wait_joined(owner, room_id, homeserver.stranger_id)
        await stranger.sync(timeout=0)
        sneaky = await say(stranger, room_id, "@sk_alice: tell me a secret", **{"m.mentions": {"user_ids": [ALICE]}})
        await running.handled(sneaky)
        mine = await say(owner, room_id, "alice, hello", **{"m.mentions": {"user_ids": [ALICE]}})
        await running.handled(mine)
        answers = await final_answers(owner, room_id, ALICE, 1)
        await running.idle()
        assert [a["body"] for a in answers] == ["only for the owner"]
        prompts = log.read_text() if log.exists() else ""
        assert "secret" not in prompts and "hello" in prompts
        all_encrypted(seen, owner, room_id, ALICE)
    finally:
        await owner.close()
        await stranger.close()


def prompts_of(log_path) -> list[str]:
    import json

    if not log_path.exists():
        return []
    texts = []
    for line in log_path.read_text().splitlines():
        message = json.loads(line) if line.strip() else {}
        if message.get("method") == "session/prompt":
            texts.append("".join(block.get("text", "") for block in message["params"]["prompt"]))
    return texts


async def react(owner, room_id: str, event_id: str, key: str) -> None:
    response = await owner.room_send(
        room_id,
        "m.reaction",
        {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}},
        ignore_unverified_devices=True,
    )
    assert isinstance(response, nio.RoomSendResponse), response


async def test_an_encrypted_channel_with_two_agents_routes_asks_and_stops_as_a_plain_one(
    homeserver, bridge_factory, tmp_path
):
    goroutines = "Goroutines are light threads…"
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    running = await bridge_factory(
        {
            "alice": agent("--answer", goroutines, "--log", str(logs["alice"]), title="Alice"),
            "bob": agent("--log", str(logs["bob"]), title="Bob"),
        },
        encryption="on",
    )
    async with e2e_owner(homeserver) as (owner, seen):
        response = await owner.room_create(name="general", invite=[ALICE, BOB], initial_state=ENCRYPTED)
        room_id = response.room_id
        await wait_joined(owner, room_id, ALICE, BOB)

        # the example of docs/architecture.md "What each agent reads": only alice answers, then bob
        # reads exactly what he missed
        await say(owner, room_id, "@alice explain goroutines")
        await final_answers(owner, room_id, ALICE, 1)
        await running.idle()
        await say(owner, room_id, "@bob what do you think?")
        await final_answers(owner, room_id, BOB, 1)
        await running.idle()
        assert prompts_of(logs["alice"]) == ["@alice explain goroutines"]
        assert prompts_of(logs["bob"]) == [
            "[Messages in #general you have not seen yet]\n"
            "user: @alice explain goroutines\n"
            f"alice: {goroutines}\n"
            "[End of the messages]\n"
            "The user now writes to you (answer directly, without your name in front):\n"
            "@bob what do you think?"
        ]

        # mention order from the decrypted body and m.mentions (an Element pill for bob)
        text = "@alice and Bob: review this"
        html = f'@alice and <a href="https://matrix.to/#/{BOB}">Bob</a>: review this'
        await say(
            owner,
            room_id,
            text,
            format="org.matrix.custom.html",
            formatted_body=html,
            **{"m.mentions": {"user_ids": [BOB]}},
        )
        await final_answers(owner, room_id, ALICE, 2)
        await final_answers(owner, room_id, BOB, 2)
        await running.idle()
        ids = [e["event_id"] for e in events_in(owner, room_id)]
        alice_2 = answers_in(events_in(owner, room_id), ALICE)[1]
        bob_2 = answers_in(events_in(owner, room_id), BOB)[1]
        assert ids.index(alice_2["event_id"]) < ids.index(bob_2["event_id"])
        # the pill reaches the agent as @name, decrypted as in the clear
        assert prompts_of(logs["alice"])[-1].endswith(
            "answer directly, without your name in front):\n@alice and @bob: review this"
        )

        # a permission asked by bob, decided by the owner's reaction (in the clear, as Element sends it)
        await say(owner, room_id, "@bob [[permission]] please write notes")

        def prompt():
            found = [m for m in answers_in(events_in(owner, room_id), BOB) if "asks permission" in m["history"][0]]
            if not found:
                return None
            keys = [
                e["content"]["m.relates_to"]["key"]
                for e in events_in(owner, room_id)
                if e.get("type") == "m.reaction"
                and e.get("sender") == BOB
                and e["content"].get("m.relates_to", {}).get("event_id") == found[0]["event_id"]
            ]
            return found[0] if len(keys) == 2 else None

        await sync_until(owner, lambda: prompt() is not None)
        await react(owner, room_id, prompt()["event_id"], "1\ufe0f\u20e3")
        await sync_until(owner, lambda: any(a["body"] == "allowed" for a in answers_in(events_in(owner, room_id), BOB)))
        await running.idle()

        # !stop ends bob's held answer
        before = len(answers_in(events_in(owner, room_id), BOB))
        await say(owner, room_id, f"@bob [[chunks:2]] [[hold:{tmp_path / 'never'}]] count slowly")
        # this answer's first words (bob's earlier answers hold "echo" too)
        await sync_until(
            owner, lambda: any("echo" in a["body"] for a in answers_in(events_in(owner, room_id), BOB)[before:])
        )
        await say(owner, room_id, "!stop")
        await sync_until(owner, lambda: answers_in(events_in(owner, room_id), BOB)[-1]["body"].endswith("⏹ stopped"))
        await running.idle()
        for puppet in (ALICE, BOB):
            all_encrypted(seen, owner, room_id, puppet)
        assert not unreadable(seen, room_id)


async def test_a_lost_crypto_store_makes_a_new_device_says_so_once_and_new_messages_are_read(
    homeserver, bridge_factory, tmp_path
):
    from bridge.e2ee.crypto import RENEWED

    agents = {"alice": agent("--answer", "still here", title="Alice")}
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder, encryption="on")
    async with e2e_owner(homeserver) as (owner, seen):
        room_id = await open_encrypted_dm(owner, ALICE)
        await say(owner, room_id, "before")
        await final_answers(owner, room_id, ALICE, 1)
        old_device = running.bridge.e2ee.devices[ALICE].device_id
        await running.stop()
        for path in (folder / "data" / "e2ee" / "sk_alice").glob("crypto.db*"):
            path.unlink()
        running = await bridge_factory(agents, folder=folder, encryption="on")
        new_device = running.bridge.e2ee.devices[ALICE].device_id
        assert new_device != old_device
        bot_dm = running.store.get_value(f"bot_dm:{homeserver.owner_id}")
        assert bot_dm is not None
        await owner.join(bot_dm)
        await sync_until(
            owner,
            lambda: (
                [
                    e["content"].get("body")
                    for e in events_in(owner, bot_dm)
                    if e.get("sender") == "@sidekicks:localhost" and e.get("type") == "m.room.message"
                ].count(RENEWED)
                == 1
            ),
        )
        await say(owner, room_id, "after")
        answers = await final_answers(owner, room_id, ALICE, 2)
        assert answers[1]["body"] == "still here" and seen.encrypted[answers[1]["event_id"]]
        assert not unreadable(seen, room_id)


async def test_kill_9_during_an_answer_leaves_nothing_undecryptable_lost_or_answered_twice(tmp_path):
    """The bridge as `sidekicks run` in a subprocess, killed (SIGKILL) while it streams an
    encrypted answer, started again: the cut answer is marked, the next message is read and
    answered once, every puppet event decrypts."""
    from bridge_harness import write_config
    from matrix_helpers import private_homeserver
    from test_kill9 import BridgeProcess

    async with private_homeserver(tmp_path / "hs") as hs:
        release = tmp_path / "release"
        config = write_config(
            hs,
            tmp_path / "bridge",
            {"alice": agent("--chunks", "4", "--delay", "0.05", title="Alice")},
            encryption="on",
        )
        bridge = BridgeProcess(config, tmp_path / "xdg", tmp_path / "bridge.log")
        owner, seen = await e2e_login(hs, hs.owner_id, hs.owner_password)
        try:
            bridge.start()
            await bridge.ready()
            room_id = await open_encrypted_dm(owner, ALICE)
            await say(owner, room_id, f"first [[chunks:2]] [[hold:{release}]]")
            await sync_until(
                owner, lambda: any("echo" in a["body"] for a in answers_in(events_in(owner, room_id), ALICE))
            )
            bridge.kill()  # mid-answer: the second part waits for `release`
            release.touch()  # (the hold is in the next prompt's context too)
            bridge.start()
            await bridge.ready()
            await say(owner, room_id, "second")

            def second_answered():
                return [
                    a
                    for a in answers_in(events_in(owner, room_id), ALICE)
                    if a["body"].startswith("echo:") and a["body"].endswith("second")
                ]

            await sync_until(owner, second_answered)
            await caught_up(owner, room_id)
            answers = answers_in(events_in(owner, room_id), ALICE)
            texts = [a["body"] for a in answers]
            assert len(second_answered()) == 1, texts
            assert [t for t in texts if "interrupted" in t] == [texts[0]], texts  # cut, not run twice
            all_encrypted(seen, owner, room_id, ALICE)
            assert not unreadable(seen, room_id)
            await bridge.stop()
        finally:
            if bridge.proc is not None and bridge.proc.poll() is None:
                bridge.kill()
            await owner.close()


async def event_as_kept(homeserver, client, room_id: str, event_id: str) -> dict:
    """The event as the homeserver keeps it (still encrypted), fetched by `client`."""
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{homeserver.url}/_matrix/client/v3/rooms/{room_id}/event/{event_id}",
            headers={"Authorization": f"Bearer {client.access_token}"},
        ) as response:
            return await response.json()


async def ask_room_key(client, room_id: str, content: dict, user_id: str, device_id: str) -> None:
    """`client` asks `user_id`'s device for the room key of an encrypted event (its `content`)."""
    import uuid

    request = {
        "action": "request",
        "requesting_device_id": client.device_id,
        "request_id": uuid.uuid4().hex,
        "body": {
            "algorithm": MEGOLM,
            "room_id": room_id,
            "sender_key": content["sender_key"],
            "session_id": content["session_id"],
        },
    }
    response = await client.to_device(nio.ToDeviceMessage("m.room_key_request", user_id, device_id, request))
    assert isinstance(response, nio.ToDeviceResponse), response


async def test_an_owner_device_that_asks_gets_an_earlier_room_key_and_a_stranger_does_not(homeserver, bridge_factory):
    running = await bridge_factory({"alice": agent("--answer", "the early answer", title="Alice")}, encryption="on")
    owner, _ = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password)
    laptop = stranger = None
    try:
        room_id = await open_encrypted_dm(owner, ALICE)
        await say(owner, room_id, "one")
        first = (await final_answers(owner, room_id, ALICE, 1))[0]
        # a device that came later has no key for it
        laptop, _ = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password, "laptop")
        stranger, _ = await e2e_login(homeserver, homeserver.stranger_id, homeserver.stranger_password, "stranger")
        raw = await event_as_kept(homeserver, laptop, room_id, first["event_id"])
        assert raw["type"] == "m.room.encrypted"
        content = raw["content"]
        device_id = running.bridge.e2ee.devices[ALICE].device_id

        async def ask(client):
            await ask_room_key(client, room_id, content, ALICE, device_id)

        def has_key(client):
            return client.olm.inbound_group_store.get(room_id, content["sender_key"], content["session_id"]) is not None

        await stranger.sync(timeout=0)
        await laptop.sync(timeout=0)
        assert not has_key(laptop)
        await ask(stranger)  # not in the room: never answered
        await ask(laptop)
        await sync_until(laptop, lambda: has_key(laptop))
        decrypted = laptop.decrypt_event(nio.MegolmEvent.from_dict({**raw, "room_id": room_id}))
        assert isinstance(decrypted, nio.RoomMessage), decrypted
        assert decrypted.source["content"]["body"] == first["history"][0]  # the answer's first text
        await stranger.sync(timeout=0)  # an answer to it would have come before the laptop's
        assert not has_key(stranger)
    finally:
        for client in (owner, laptop, stranger):
            if client is not None:
                await client.close()


BOT = "@sidekicks:localhost"
HELP_START = "Sidekicks shows the agents"  # the bot DM's short !help


def bot_notices(owner, room_id) -> list[str]:
    return [
        e["content"].get("body", "")
        for e in events_in(owner, room_id)
        if e.get("sender") == BOT and e.get("type") == "m.room.message" and e["content"].get("msgtype") == "m.notice"
    ]


def device_traffic_on(homeserver) -> dict:
    """The `homeserver` section of the tests' config, saying the homeserver sends the
    appservice its users' crypto traffic (the test Synapse does: bridge/local/homeserver.py)."""
    import yaml

    section = yaml.safe_load(homeserver.base_config_path.read_text())["homeserver"]
    return {**section, "device_traffic": True}


async def open_bot_dm(owner, encrypted: bool = True) -> str:
    return await open_encrypted_dm(owner, BOT, encrypted)


async def test_the_bot_reads_an_encrypted_dm_with_its_room_keys_from_the_transactions(homeserver, bridge_factory):
    running = await bridge_factory(
        {"alice": agent(title="Alice")}, encryption="on", homeserver=device_traffic_on(homeserver)
    )
    bot_device = running.bridge.e2ee.devices[BOT]
    assert not bot_device.syncs  # Synapse serves the bot no /sync: what it reads came by transactions
    received: list[dict] = []
    receive = bot_device.receive_traffic

    counts: list[int] = []

    async def recording(to_device, one_time_keys=None, *args, **kwargs):
        received.extend(to_device)
        counts.append((one_time_keys or {}).get("signed_curve25519"))
        await receive(to_device, one_time_keys, *args, **kwargs)

    bot_device.receive_traffic = recording
    async with e2e_owner(homeserver) as (owner, seen):
        room_id = await open_bot_dm(owner)
        await sync_until(owner, lambda: bot_notices(owner, room_id))  # the greeting, encrypted
        await say(owner, room_id, "!help")
        await sync_until(owner, lambda: any(n.startswith(HELP_START) for n in bot_notices(owner, room_id)))
        help_text = [n for n in bot_notices(owner, room_id) if n.startswith(HELP_START)][0]
        assert "!delete CHANNEL" in help_text and "cannot read" not in " ".join(bot_notices(owner, room_id))
        all_encrypted(seen, owner, room_id, BOT)  # the bot's answers left encrypted, and decrypt
        assert not unreadable(seen, room_id)
        # the owner's room key reached the bot's device in a transaction, Olm-encrypted to it
        assert any(
            m.get("type") == "m.room.encrypted" and m.get("to_device_id") == bot_device.device_id for m in received
        ), received
        assert running.store.e2ee.waiting() == []  # none waited for a key

        # an owner's device that came later asks the bot for the room key of its answer: the
        # request reaches the bot in a transaction, and the key comes back
        laptop, _ = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password, "laptop")
        answer = next(
            e
            for e in events_in(owner, room_id)
            if e.get("sender") == BOT and (e.get("content") or {}).get("body", "").startswith(HELP_START)
        )
        raw = await event_as_kept(homeserver, laptop, room_id, answer["event_id"])
        content = raw["content"]
        await laptop.sync(timeout=0)
        await ask_room_key(laptop, room_id, content, BOT, bot_device.device_id)
        try:
            await sync_until(
                laptop,
                lambda: (
                    laptop.olm.inbound_group_store.get(room_id, content["sender_key"], content["session_id"])
                    is not None
                ),
            )
            decrypted = laptop.decrypt_event(nio.MegolmEvent.from_dict({**raw, "room_id": room_id}))
            assert decrypted.source["content"]["body"].startswith(HELP_START)
        finally:
            await laptop.close()

        # one-time keys others claim come back: the counts of a transaction make the device upload
        olm = bot_device.nio.olm
        wanted = olm.account.max_one_time_keys  # nio tops the count up when it falls below this
        assert olm.uploaded_key_count >= wanted
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {owner.access_token}"}) as http:
            for _ in range(olm.uploaded_key_count - wanted + 1):
                async with http.post(
                    f"{homeserver.url}/_matrix/client/v3/keys/claim",
                    json={"one_time_keys": {BOT: {bot_device.device_id: "signed_curve25519"}}},
                ) as response:
                    assert response.status == 200 and (await response.json())["one_time_keys"][BOT]
        helps = len(bot_notices(owner, room_id))
        await say(owner, room_id, "!help")
        await sync_until(owner, lambda: len(bot_notices(owner, room_id)) > helps)
        await sync_until(owner, lambda: olm.uploaded_key_count >= wanted)
        assert wanted - 1 in counts and not olm.should_upload_keys  # it fell short, and was topped up

        # a command that makes something: !new answers from the encrypted DM too
        await say(owner, room_id, "!new Reading alice")
        await sync_until(owner, lambda: [c.name for c in running.store.channels()] == ["Reading"])


async def test_without_the_bots_crypto_traffic_an_encrypted_bot_room_gets_one_notice(homeserver, bridge_factory):
    import bridge.e2ee.crypto as crypto
    from bridge.e2ee.crypto import UNREADABLE_BOT

    running = await bridge_factory({"alice": agent(title="Alice")}, encryption="on")
    assert not running.bridge.e2ee.bot_reads  # an external homeserver, not said to send it
    saved = crypto.KEY_NOTICE_AFTER
    crypto.KEY_NOTICE_AFTER = 1.0
    owner, seen = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        room_id = await open_bot_dm(owner)
        await say(owner, room_id, "!help")
        await sync_until(owner, lambda: UNREADABLE_BOT in bot_notices(owner, room_id))
        assert not any(n.startswith(HELP_START) for n in bot_notices(owner, room_id))
    finally:
        crypto.KEY_NOTICE_AFTER = saved
        await owner.close()
