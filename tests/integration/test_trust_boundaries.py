"""Trust boundaries, end to end (docs/SECURITY.md): a hostile agent (tests/agents/hostile_agent.py)
cannot make the bridge post files it should not, freeze it or flood it; a stranger changes
nothing; every answer arrives, also a long one in an encrypted room.

Real Synapse, the real bridge in-process, real agent processes, the owner's matrix-nio client
(with encryption where the test says so) and a stranger's.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import time
from pathlib import Path

import nio
from bridge_harness import answers_in
from helpers import joined, open_dm, say
from matrix_helpers import caught_up, events_in, sync_until
from test_e2ee import ENCRYPTED, all_encrypted, e2e_login, unreadable
from test_e2ee import say as say_encrypted

from bridge.channels.base.stream import CUT_LINE, MAX_ANSWER_BYTES

ALICE = "@sk_alice:localhost"
HOSTILE = Path(__file__).resolve().parents[1] / "agents" / "hostile_agent.py"
STATUS = ("⏳", "💭", "✍️", "🔧")


_spec = importlib.util.spec_from_file_location("hostile_agent", HOSTILE)
hostile_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hostile_agent)  # its text generators: what the owner must read back


def hostile(**extra) -> dict:
    return {"command": [sys.executable, str(HOSTILE)], **extra}


def final(messages: list[dict]) -> bool:
    return bool(messages) and not any(m["body"].startswith(STATUS) or "getting ready" in m["body"] for m in messages)


async def answered(owner, room_id: str, needle: str, sender: str = ALICE) -> list[dict]:
    """Until a final message of `sender` contains `needle`; all of `sender`'s messages."""

    def done() -> bool:
        messages = answers_in(events_in(owner, room_id), sender)
        return final(messages) and any(needle in m["body"] for m in messages)

    await sync_until(owner, done)
    return answers_in(events_in(owner, room_id), sender)


class LoopLag:
    """The event loop's worst lateness while it runs: a task asks to wake every 10 ms and
    records how late it woke (the bridge runs in this loop: a stall of the bridge is a stall here)."""

    def __init__(self, every: float = 0.01):
        self.every = every
        self.worst = 0.0
        self.samples = 0
        self._task: asyncio.Task | None = None

    async def _watch(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.every)
            self.worst = max(self.worst, time.perf_counter() - before - self.every)
            self.samples += 1

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def messages_of(client, room_id: str, sender: str = ALICE) -> list[dict]:
    return answers_in(events_in(client, room_id), sender)


# ---- 1. files an agent hands the bridge ---------------------------------------------------------


async def test_an_agent_posts_only_regular_files_of_its_working_directory(homeserver, bridge_factory, tmp_path, owner):
    work = tmp_path / "work"
    work.mkdir()
    (work / "ok.txt").write_text("fine to share\n")
    os.mkfifo(work / "pipe")
    (work / "escape").symlink_to("/etc/passwd")
    (work / "zero").symlink_to("/dev/zero")
    bridge_folder = work / "bridge"  # the bridge's config and data folder inside the agent's cwd
    running = await bridge_factory({"alice": hostile(cwd=str(work))}, folder=bridge_folder)
    secret = running.bridge.registration.as_token
    room_id = await open_dm(owner)
    links = [
        homeserver.registration_path,
        bridge_folder / "config.yaml",
        "/proc/self/environ",
        "/dev/zero",
        work / "zero",
        work / "pipe",
        work / "escape",
        work / "ok.txt",
    ]
    await say(owner, room_id, " ".join(f"[[link:file://{path}]]" for path in links))
    messages = await answered(owner, room_id, "links sent")
    text = "\n".join(m["body"] for m in messages)
    refusals = [line for line in text.splitlines() if "could not be posted" in line]
    assert len(refusals) == 7, text
    assert "registration.yaml] could not be posted: it is in the bridge's own configuration or data folder" in text
    assert "config.yaml] could not be posted: it is in the bridge's own configuration or data folder" in text
    assert "environ] could not be posted: it is outside" in text
    assert "pipe] could not be posted: it is not a regular file (a pipe)" in text
    assert "escape] could not be posted: it is outside" in text
    files = [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and (e.get("content") or {}).get("msgtype") == "m.file"
    ]
    assert [f["content"]["body"] for f in files] == ["ok.txt"]
    assert not any(secret in str(e) for e in events_in(owner, room_id))
    # the channel is not wedged: the next message is answered
    await say(owner, room_id, "[[answer:still here]]")
    await answered(owner, room_id, "still here")
    await running.idle()


# ---- 2. every answer arrives: each event fits as sent ---------------------------------------------


async def test_a_30000_character_answer_in_an_encrypted_dm_is_decrypted_whole(homeserver, bridge_factory):
    running = await bridge_factory({"alice": hostile()}, encryption="on")
    owner, seen = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        room_id = await open_dm(owner, initial_state=ENCRYPTED)
        await say_encrypted(owner, room_id, "[[markdown:30000]]")
        expected = hostile_agent.markdown(30000)

        def whole() -> bool:
            messages = answers_in(events_in(owner, room_id), ALICE)
            return final(messages) and "".join(m["body"] for m in messages) == expected

        await sync_until(owner, whole)
        await running.idle()  # the bridge went idle: the answer was taken and stored
        messages = answers_in(events_in(owner, room_id), ALICE)
        assert len(messages) >= 3 and all(m["html"] for m in messages)  # split, and still formatted
        all_encrypted(seen, owner, room_id, ALICE)
        assert not unreadable(seen, room_id)
        channel = running.store.channel_by_room(room_id)
        assert running.store.last_messages(channel.id, 1)[0].text == expected
    finally:
        await owner.close()


async def test_html_five_times_its_text_and_an_8_mib_answer_arrive_in_a_plain_room(bridge_factory, owner):
    running = await bridge_factory({"alice": hostile()})
    room_id = await open_dm(owner)
    await say(owner, room_id, "[[amps:30000]]")
    expected = hostile_agent.amps(30000)

    def whole() -> bool:
        messages = answers_in(events_in(owner, room_id), ALICE)
        return final(messages) and "".join(m["body"] for m in messages) == expected

    await sync_until(owner, whole)
    await running.idle()
    first = len(answers_in(events_in(owner, room_id), ALICE))

    await say(owner, room_id, f"[[bytes:{8 * 1024 * 1024}]]")
    await sync_until(
        owner,
        lambda: (
            final(answers_in(events_in(owner, room_id), ALICE)[first:])
            and CUT_LINE in answers_in(events_in(owner, room_id), ALICE)[-1]["body"]
        ),
    )
    await running.idle()
    capped = answers_in(events_in(owner, room_id), ALICE)[first:]
    text = "".join(m["body"] for m in capped)
    assert text.endswith(CUT_LINE)
    assert MAX_ANSWER_BYTES <= len(text.encode()) <= MAX_ANSWER_BYTES + 200
    assert len(capped) <= 120  # not the ~700 messages of 8 MiB


# ---- 5. a stranger cannot switch a room to encrypted answers --------------------------------------


async def test_a_strangers_fake_encrypted_event_does_not_make_a_plain_room_encrypted(
    homeserver, bridge_factory, owner, stranger
):
    running = await bridge_factory({"alice": hostile()}, encryption="on")
    created = await owner.room_create(name="plain", invite=[ALICE, homeserver.stranger_id])
    assert isinstance(created, nio.RoomCreateResponse), created
    room_id = created.room_id
    await sync_until(owner, lambda: joined(owner, room_id, ALICE))
    assert isinstance(await stranger.join(room_id), nio.JoinResponse)
    fake = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg",
        "sender_key": "x" * 43,
        "device_id": "STRANGER",
        "session_id": "y" * 43,
    }
    sent = await stranger.room_send(room_id, "m.room.encrypted", fake)
    assert isinstance(sent, nio.RoomSendResponse), sent
    await running.handled(sent.event_id)
    assert not running.bridge.e2ee.is_encrypted(ALICE, room_id)
    await say(owner, room_id, "[[answer:readable]]")
    await answered(owner, room_id, "readable")
    mine = [
        e for e in events_in(owner, room_id) if e.get("sender") == ALICE and e.get("type") not in ("m.room.member",)
    ]
    assert mine and all(e["type"] == "m.room.message" for e in mine), [e["type"] for e in mine]
    # no "cannot read" notice either: the stranger's event changed nothing
    assert not any("cannot read" in (e.get("content") or {}).get("body", "") for e in mine)
    await running.idle()


# ---- 4. an agent's regular expression --------------------------------------------------------------


async def test_a_catastrophic_pattern_does_not_stall_the_bridge(bridge_factory, owner):
    running = await bridge_factory({"alice": hostile()})
    room_id = await open_dm(owner)
    await say(owner, room_id, "[[pattern:x]]")
    await sync_until(owner, lambda: any("Your code?" in m["body"] for m in messages_of(owner, room_id)))
    async with LoopLag() as lag:
        # ^(a+)+$ on 28 a's and a '!': about 2^28 steps for Python's re, minutes of a frozen loop
        await say(owner, room_id, "a" * 28 + "!")
        await sync_until(owner, lambda: any("does not fit" in m["body"] for m in messages_of(owner, room_id)))
        await say(owner, room_id, "aaaa")
        await answered(owner, room_id, 'elicitation: {"action": "accept", "content": {"code": "aaaa"}}')
    assert lag.samples > 10 and lag.worst < 1.0, f"the loop stalled {lag.worst:.3f} s"
    await running.idle()


# ---- 7. a thousand commands ---------------------------------------------------------------------


async def test_a_thousand_commands_publish_fifty_descriptions_and_all_still_work(homeserver, bridge_factory, owner):
    from bridge_harness import wait_until
    from test_conventions import descriptions_in

    from bridge.matrix.msc4391 import MAX_DESCRIPTIONS

    running = await bridge_factory({"alice": hostile()})
    made = await owner.room_create(
        name="many commands", invite=[ALICE], power_level_override={"users": {ALICE: 50, homeserver.owner_id: 100}}
    )
    assert isinstance(made, nio.RoomCreateResponse), made
    room_id = made.room_id
    await sync_until(owner, lambda: joined(owner, room_id, ALICE))
    await say(owner, room_id, "[[commands:1000]]")
    await answered(owner, room_id, "1000 commands")
    await wait_until(lambda: len(running.store.agent_commands("alice") or []) == 1000, what="stored")

    async def published() -> bool:
        await running.bridge.command_descriptions.idle()
        return len(await descriptions_in(homeserver, owner, room_id, ALICE)) == MAX_DESCRIPTIONS

    await wait_until(published, what="50 descriptions")
    await running.bridge.command_descriptions.idle()
    found = await descriptions_in(homeserver, owner, room_id, ALICE)
    assert sorted(c["command"] for c in found.values()) == sorted(f"cmd{i}" for i in range(50))

    # !commands lists every one; the 1,000th still runs as text
    await say(owner, room_id, "!commands")
    await sync_until(
        owner, lambda: any("cmd999" in (e.get("content") or {}).get("body", "") for e in events_in(owner, room_id))
    )
    await say(owner, room_id, "/alice:cmd999 now")
    await answered(owner, room_id, "echo: /cmd999 now")
    await running.idle()


# ---- 9. a room key asked of the sender's device is taken when it comes ----------------------------


async def test_a_room_key_asked_of_the_owners_device_is_accepted_when_forwarded(homeserver, bridge_factory):
    """The owner's client withholds a message's room key from the puppet's device (blacklisted
    for one message, as a client that did not know the device yet would): the bridge asks the
    owner's device for it; the owner's client forwards it (m.forwarded_room_key, Olm-encrypted,
    as Element does for a device it had shared the session with) and the message is answered."""
    running = await bridge_factory({"alice": hostile()}, encryption="on")
    owner, seen = await e2e_login(homeserver, homeserver.owner_id, homeserver.owner_password)
    requests: list = []

    handle = owner.olm._handle_key_requests  # nio hands key requests to no callback: seen here

    def seen_request(event):
        requests.append(event)
        return handle(event)

    owner.olm._handle_key_requests = seen_request
    try:
        room_id = await open_dm(owner, initial_state=ENCRYPTED)
        await say_encrypted(owner, room_id, "[[answer:first]]")
        await answered(owner, room_id, "first")
        puppet_device = running.bridge.e2ee.devices[ALICE]
        device = owner.device_store[ALICE][puppet_device.device_id]

        # the second message goes out in a new session the puppet's device is not given
        owner.blacklist_device(device)
        owner.olm.outbound_group_sessions.pop(room_id, None)
        await say_encrypted(owner, room_id, "[[answer:second]]")
        session_id = owner.olm.outbound_group_sessions[room_id].id
        owner.unblacklist_device(device)
        await sync_until(owner, lambda: any(r.session_id == session_id for r in requests))
        # the bridge's request is registered with nio, which drops forwarded keys nobody asked for
        assert session_id in puppet_device.nio.olm.outgoing_key_requests

        olm = owner.olm
        group_session = olm.inbound_group_store.get(room_id, olm.account.identity_keys["curve25519"], session_id)
        olm_session = olm.session_store.get(device.curve25519)
        assert group_session is not None and olm_session is not None
        forwarded = olm._encrypt_forwarding_key(room_id, group_session, olm_session, device)
        assert isinstance(await owner.to_device(forwarded), nio.ToDeviceResponse)
        await answered(owner, room_id, "second")
        await running.idle()
        assert session_id not in puppet_device.nio.olm.outgoing_key_requests  # done with
        all_encrypted(seen, owner, room_id, ALICE)
    finally:
        await owner.close()


# ---- 8. a room upgrade moves the channel -----------------------------------------------------------


async def test_a_room_upgrade_moves_the_channel_with_its_history_and_session(
    homeserver, bridge_factory, tmp_path, owner
):
    import json

    from bridge_harness import agent
    from test_conventions import request

    log = tmp_path / "alice.log"
    running = await bridge_factory(
        {"alice": agent("--log", str(log), "--load-session", "--state", str(tmp_path / "sessions"))}
    )

    def received() -> list[dict]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    # alice may post at 50: an upgrade mutes the old room for users below that (Synapse)
    made = await owner.room_create(
        name="project",
        invite=[ALICE],
        preset=nio.RoomPreset.private_chat,
        power_level_override={"users": {ALICE: 50, homeserver.owner_id: 100}},
    )
    assert isinstance(made, nio.RoomCreateResponse), made
    old = made.room_id
    await sync_until(owner, lambda: joined(owner, old, ALICE))
    await say(owner, old, "remember the word kumquat")
    await answered(owner, old, "kumquat")
    await running.idle()
    channel = running.store.channel_by_room(old)
    first_session = running.store.member(channel.id, "alice").session_id

    # the owner upgrades the room, and (as Element does) invites its members to the new one
    status, version = await request(homeserver, owner, "GET", f"/_matrix/client/v3/rooms/{old}/state/m.room.create/")
    assert status == 200, version
    status, upgraded = await request(
        homeserver,
        owner,
        "POST",
        f"/_matrix/client/v3/rooms/{old}/upgrade",
        {"new_version": version.get("room_version", "1")},
    )
    assert status == 200, upgraded
    new = upgraded["replacement_room"]
    assert isinstance(await owner.room_invite(new, ALICE), nio.RoomInviteResponse)
    await sync_until(
        owner,
        lambda: (
            joined(owner, new, ALICE)
            and any(
                "moved to the upgraded room" in (e.get("content") or {}).get("body", "") and new in e["content"]["body"]
                for e in events_in(owner, old)
            )
        ),
    )

    # the channel is the same one, now in the new room: history, member, session
    moved = running.store.channel_by_room(new)
    assert moved is not None and moved.id == channel.id and moved.name == "project"
    assert running.store.channel_by_room(old) is None
    await say(owner, new, "which word?")
    await answered(owner, new, "which word?")
    await running.idle()
    assert running.store.member(channel.id, "alice").session_id == first_session
    assert sum(1 for m in received() if m.get("method") == "session/new") == 1
    prompts = [m for m in received() if m.get("method") == "session/prompt"]
    assert prompts[-1]["params"]["sessionId"] == first_session
    assert [m.text for m in running.store.last_messages(channel.id, 10)][:1] == ["remember the word kumquat"]
    assert running.store.count_messages(channel.id) == 4

    # the old room is no channel any more: a message there is not answered
    stale = await say(owner, old, "anyone here?")
    await running.handled(stale)
    await running.idle()
    await caught_up(owner, old)
    assert not any("anyone here" in m["body"] for m in messages_of(owner, old))
    assert running.store.count_messages(channel.id) == 4
