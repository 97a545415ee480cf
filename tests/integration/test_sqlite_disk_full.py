"""SQLite on a disk that fills up while an answer streams (docs/outages.md "The SQLite disk full").

The bridge's data folder is a small tmpfs of the test's own; once the answer's text has begun,
a file fills the disk. The answer goes on streaming and is shown whole; the owner's message in
another DM waits at the homeserver; each room whose messages wait is told once, in words that
say the disk is full. Once the file is gone, the message is answered, and the store keeps each
message and each answer once.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from bridge_harness import agent, answers_in, start_bridge, wait_until
from invariants import STATUS, edits_after_final, prompts_ended
from matrix_helpers import caught_up, events_in, login, open_dm, sync_until

from bridge.outage import BACK_TEXT, DOWN_TEXT, FULL_TEXT

ALICE, BOB = "@sk_alice:localhost", "@sk_bob:localhost"
SIZE = 3000


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs mounted for the test (the tests run as root), unmounted afterwards."""
    where = tmp_path / "small-disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=False)


def fill(disk: Path) -> Path:
    """A file that takes every free byte of `disk`."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\0" * 65536
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    return filler
                block = block[: len(block) // 2]  # the last bytes too
    finally:
        os.close(fd)


def _whole_text() -> str:
    line = "The quick brown fox jumps over the lazy dog. 0123456789\n"
    return (line * (SIZE // len(line) + 1))[:SIZE]


def _bodies(owner, room_id) -> list[str]:
    return [e["content"].get("body", "") for e in events_in(owner, room_id) if e.get("type") == "m.room.message"]


async def test_a_full_disk_under_sqlite_loses_nothing_and_is_said_once(homeserver, small_disk, tmp_path):
    alice_log = tmp_path / "alice.jsonl"
    streaming_agent = agent("--log", str(alice_log), "--answer-size", str(SIZE), "--chunks", "100", "--delay", "0.1")
    running = await start_bridge(
        homeserver,
        tmp_path / "bridge",
        {"alice": streaming_agent, "bob": agent("--echo-last-line")},
        data_dir=small_disk / "data",
    )
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    filler: Path | None = None
    try:
        streaming = await open_dm(owner, ALICE)
        other = await open_dm(owner, BOB)

        def answer_of(room_id: str, puppet: str) -> str:
            answers = [a for a in answers_in(events_in(owner, room_id), puppet) if a["msgtype"] != "m.notice"]
            return answers[-1]["body"] if answers else ""

        await owner.room_send(streaming, "m.room.message", {"msgtype": "m.text", "body": "a long one"})
        await sync_until(owner, lambda: "\n\n" in answer_of(streaming, ALICE))  # its text has begun
        filler = fill(small_disk)
        await owner.room_send(other, "m.room.message", {"msgtype": "m.text", "body": "meanwhile"})
        # told, while the disk is full, and the answer is shown whole all the same
        await sync_until(owner, lambda: FULL_TEXT in _bodies(owner, other), timeout=60)
        await sync_until(owner, lambda: answer_of(streaming, ALICE) == _whole_text(), timeout=60)
        assert prompts_ended(alice_log) == 1
        assert not any(b == "echo: meanwhile" for b in _bodies(owner, other))  # it waits
        filler.unlink()
        filler = None
        await sync_until(owner, lambda: answer_of(other, BOB) == "echo: meanwhile", timeout=120)
        await sync_until(owner, lambda: BACK_TEXT in _bodies(owner, other), timeout=60)
        await running.idle(timeout=120)
        for room_id in (streaming, other):
            await caught_up(owner, room_id)

        for room_id in (streaming, other):  # each room told at most once, and in words of its own
            told = Counter(b for b in _bodies(owner, room_id) if b in (FULL_TEXT, DOWN_TEXT, BACK_TEXT))
            assert told[FULL_TEXT] <= 1 and told[DOWN_TEXT] == 0 and told[BACK_TEXT] == told[FULL_TEXT], told
        for room_id, puppet, shown in ((streaming, ALICE, _whole_text()), (other, BOB, "echo: meanwhile")):
            answers = [a["body"] for a in answers_in(events_in(owner, room_id), puppet) if a["msgtype"] != "m.notice"]
            assert answers == [shown], answers
        assert not _whole_text().startswith(STATUS)
        assert edits_after_final(events_in(owner, streaming), ALICE) == []
        for room_id, shown in ((streaming, _whole_text()), (other, "echo: meanwhile")):
            stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
            assert len([m for m in stored if m.role == "user"]) == 1
            assert [m.text for m in stored if m.role == "agent"] == [shown]
        await wait_until(lambda: running.bridge.outage.outages >= 1, 5, "the outage counted")
    finally:
        if filler is not None:
            filler.unlink(missing_ok=True)
        await owner.close()
        await running.stop()
