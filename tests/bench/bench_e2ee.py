"""Encrypted vs plain DM, same run: the first answer event the owner sees, and the
bridge's CPU time per encrypted message.

One bridge (in process, `encryption: on`) with an echo agent; an owner who encrypts (matrix-nio
with `e2e`, its own device, store and sync loop) has an encrypted DM and a plain DM with it.
Rounds alternate between the two rooms, one at a time, so both see the same machine and the same
Synapse. "First event" is from the owner's send until its client has the puppet's first event
(the placeholder) in hand — decrypted, in the encrypted room. CPU: the time the bridge spends in
its crypto (Megolm decrypt of the owner's message, Megolm encrypt of each answer event, Olm
encrypt of room keys), measured around those calls with the thread's CPU clock, per encrypted
owner message (its answer's placeholder, edits and final text included).
"""

from __future__ import annotations

import asyncio
import time

import nio
from bridge_harness import agent, start_bridge
from common import median, p50, p99

ECHO = "@sk_echo:localhost"
MEGOLM = "m.megolm.v1.aes-sha2"
GOAL = 1.15


class CryptoClock:
    """CPU seconds spent in the bridge's crypto calls (thread CPU time; the calls are sync)."""

    def __init__(self):
        self.seconds = 0.0
        self._undo = []

    def wrap(self, owner, name: str) -> None:
        original = getattr(owner, name)
        clock = self

        def timed(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                clock.seconds += time.thread_time() - t0

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def undo(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


async def run(bench, folder) -> dict:
    from nio.crypto import Olm, OutboundGroupSession

    from bridge.e2ee.device import Device

    rounds = 10 if bench.quick else 50
    running = await start_bridge(bench, folder / "bridge-e2ee", {"echo": agent(title="Echo")}, encryption="on")
    store = folder / "owner-e2ee"
    store.mkdir(parents=True, exist_ok=True)
    owner = nio.AsyncClient(
        bench.url,
        bench.owner_id,
        store_path=str(store),
        config=nio.AsyncClientConfig(encryption_enabled=True, request_timeout=30),
    )
    seen: dict[str, list[tuple[float, dict]]] = {}

    def on_event(room, event) -> None:
        source = getattr(event, "source", {}) or {}
        if source.get("sender") == ECHO and source.get("type") == "m.room.message":
            seen.setdefault(room.room_id, []).append((time.monotonic(), source))

    owner.add_event_callback(on_event, (nio.Event,))
    clock = CryptoClock()
    try:
        assert isinstance(await owner.login(bench.owner_password, device_name="bench"), nio.LoginResponse)
        await owner.keys_upload()

        async def syncing():
            while True:
                await owner.sync(timeout=1000)
                if owner.should_query_keys:
                    await owner.keys_query()

        sync_task = asyncio.create_task(syncing())

        async def dm(encrypted: bool) -> str:
            room = (
                await owner.room_create(
                    is_direct=True,
                    invite=[ECHO],
                    preset=nio.RoomPreset.trusted_private_chat,
                    initial_state=[{"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}]
                    if encrypted
                    else [],
                )
            ).room_id
            deadline = time.monotonic() + 60
            while not (
                room in owner.rooms and ECHO in owner.rooms[room].users and ECHO not in owner.rooms[room].invited_users
            ):
                assert time.monotonic() < deadline, "the puppet did not join"
                await asyncio.sleep(0.05)
            return room

        async def once(room: str, token: str) -> float:
            start = len(seen.get(room, []))
            t0 = time.monotonic()
            response = await owner.room_send(
                room, "m.room.message", {"msgtype": "m.text", "body": token}, ignore_unverified_devices=True
            )
            assert isinstance(response, nio.RoomSendResponse), response
            deadline = t0 + 60
            while len(seen.get(room, [])) <= start:
                assert time.monotonic() < deadline, f"no answer to {token}"
                await asyncio.sleep(0.005)
            first = seen[room][start][0]
            while not any(
                token in (e.get("content") or {}).get("body", "")
                and "✍️" not in (e.get("content") or {}).get("body", "")
                for _, e in seen[room][start:]
            ):
                assert time.monotonic() < deadline, f"no final answer to {token}"
                await asyncio.sleep(0.005)
            await running.idle()
            return first - t0

        encrypted, plain = await dm(True), await dm(False)
        for i in range(3):  # warm up: agent start, session, the room key shared
            await once(encrypted, f"warm-e{i}")
            await once(plain, f"warm-p{i}")
        clock.wrap(Device, "decrypt")
        clock.wrap(OutboundGroupSession, "encrypt")
        clock.wrap(Olm, "_olm_encrypt")
        enc_t, plain_t = [], []
        for i in range(rounds):
            if i % 2:
                enc_t.append(await once(encrypted, f"bench-e{i}"))
                plain_t.append(await once(plain, f"bench-p{i}"))
            else:
                plain_t.append(await once(plain, f"bench-p{i}"))
                enc_t.append(await once(encrypted, f"bench-e{i}"))
        sync_task.cancel()
        await asyncio.gather(sync_task, return_exceptions=True)
        return {"rounds": rounds, "encrypted": enc_t, "plain": plain_t, "crypto_cpu": clock.seconds / rounds}
    finally:
        clock.undo()
        await owner.close()
        await running.stop()


def rows(r: dict) -> list[tuple]:
    enc, plain = median(r["encrypted"]), median(r["plain"])
    ratio = enc / plain if plain else float("nan")
    return [
        (
            "Encryption",
            f"first answer event, encrypted DM (p50/p99, {r['rounds']} rounds)",
            f"{p50(r['encrypted']) * 1000:.0f} / {p99(r['encrypted']) * 1000:.0f} ms",
            f"{p50(r['plain']) * 1000:.0f} / {p99(r['plain']) * 1000:.0f} ms (plain DM)",
            f"{ratio:.2f}×",
            f"≤ {GOAL}×",
            ratio <= GOAL,
        ),
        (
            "Encryption",
            "bridge CPU in crypto per encrypted message (decrypt + each answer event)",
            f"{r['crypto_cpu'] * 1000:.2f} ms",
            "",
            "",
            "(info)",
            None,
        ),
    ]


def notes(r: dict) -> list[str]:
    return [
        "Encryption: the owner is matrix-nio with e2e (its own device); the encrypted room's "
        "first event is counted once the owner's client has decrypted it."
    ]
