"""The bridge while its PostgreSQL goes away: the real bridge, the session's
Synapse, a PostgreSQL cluster of this module's own that the tests stop and restart.

While the database is down every transaction is refused, so the homeserver keeps the owner's
messages; the owner is told once; when the database is back the bridge pings the homeserver and
every message is answered, once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from bridge_harness import agent, answers_in, start_bridge, wait_until
from matrix_helpers import events_in, login, open_dm, record_figures, sync_until

from bridge.outage import BACK_TEXT, DOWN_TEXT

PUPPET = "@sk_alice:localhost"
STATUS = ("⏳", "💭", "✍️", "🔧")
pg = pytest.mark.postgres


def bodies(owner, room_id, sender=None) -> list[str]:
    return [
        e["content"].get("body", "")
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and (sender is None or e.get("sender") == sender)
    ]


def answered(owner, room_id, texts):
    def done() -> bool:
        answers = answers_in(events_in(owner, room_id), PUPPET)
        echoed = Counter(
            a["body"].splitlines()[-1].removeprefix("echo: ") for a in answers if not a["body"].startswith(STATUS)
        )
        return all(echoed[text] for text in texts)

    return done


@pg
async def test_messages_written_while_postgresql_is_down_wait_and_are_answered_once(
    homeserver, restartable_postgres, drop_tables, tmp_path
):
    drop_tables(restartable_postgres.url)
    cluster = restartable_postgres.cluster
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()}, database=restartable_postgres.url)
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    sent = ["before", "while down 1", "while down 2", "after"]
    try:
        room_id = await open_dm(owner, PUPPET)
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": sent[0]})
        await sync_until(owner, answered(owner, room_id, sent[:1]))
        cluster.shut_down()
        try:
            for text in sent[1:3]:
                await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": text})
            # told once, in the room whose messages wait, after a few seconds
            await sync_until(owner, lambda: DOWN_TEXT in bodies(owner, room_id))
        finally:
            cluster.start_again()
        await sync_until(owner, answered(owner, room_id, sent[:3]))
        await sync_until(owner, lambda: BACK_TEXT in bodies(owner, room_id))
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": sent[3]})
        await sync_until(owner, answered(owner, room_id, sent))
        await running.idle()
        answers = [a for a in answers_in(events_in(owner, room_id), PUPPET)]
        echoed = Counter(a["body"].splitlines()[-1].removeprefix("echo: ") for a in answers)
        notices = Counter(b for b in bodies(owner, room_id) if b in (DOWN_TEXT, BACK_TEXT))
        stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
        figures = {
            "messages": len(sent),
            "lost": sum(1 for t in sent if not echoed[t]),
            "answered twice": sum(n - 1 for n in echoed.values() if n > 1),
            "down notices": notices[DOWN_TEXT],
            "stored": len(stored),
        }
        record_figures("PostgreSQL down under the bridge", figures)
        assert figures["lost"] == 0 and figures["answered twice"] == 0, figures
        assert notices == {DOWN_TEXT: 1, BACK_TEXT: 1}, notices
        # told by the room's own agent (docs/outages.md "Who tells a room")
        assert Counter(b for b in bodies(owner, room_id, PUPPET) if b in (DOWN_TEXT, BACK_TEXT)) == notices
        assert [m.text for m in stored if m.role == "user"] == sent
        assert running.bridge.outage.outages == 1
    finally:
        await owner.close()
        await running.stop()


@pg
async def test_postgresql_restarted_in_the_middle_of_an_answer_loses_nothing(
    homeserver, restartable_postgres, drop_tables, tmp_path
):
    drop_tables(restartable_postgres.url)
    release = tmp_path / "release"
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()}, database=restartable_postgres.url)
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        room_id = await open_dm(owner, PUPPET)
        long_one = f"[[chunks:4]] [[hold:{release}]] long one"
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": long_one})
        await sync_until(owner, lambda: any(a["edits"] >= 1 for a in answers_in(events_in(owner, room_id), PUPPET)))
        restartable_postgres.cluster.restart()  # pg_ctl restart -m fast: every connection ended
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": "next"})
        release.touch()
        await sync_until(owner, answered(owner, room_id, [long_one, "next"]))
        await running.idle()
        answers = answers_in(events_in(owner, room_id), PUPPET)
        assert len(answers) == 2 and not any("interrupted" in a["body"] for a in answers), [a["body"] for a in answers]
        stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
        # each message and each answer stored once ("next" came while the long one was written)
        assert sorted(m.text for m in stored if m.role == "user") == sorted([long_one, "next"])
        assert sorted(m.text for m in stored if m.role == "agent") == sorted(a["body"] for a in answers)
    finally:
        release.touch()
        await owner.close()
        await running.stop()


async def test_a_sqlite_file_that_cannot_be_written_makes_messages_wait_with_one_notice(homeserver, tmp_path):
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    sent = ["before", "while read-only"]
    try:
        room_id = await open_dm(owner, PUPPET)
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": sent[0]})
        await sync_until(owner, answered(owner, room_id, sent[:1]))
        await running.idle()
        db = running.store.core.db
        db.execute_sql("PRAGMA query_only = 1")  # SQLite refuses every write (as a read-only file)
        try:
            await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": sent[1]})
            await sync_until(owner, lambda: DOWN_TEXT in bodies(owner, room_id))
            # nothing was recorded as taken while it could not be written
            assert [
                m.text
                for m in running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
                if m.role == "user"
            ] == sent[:1]
        finally:
            db.execute_sql("PRAGMA query_only = 0")
        await sync_until(owner, answered(owner, room_id, sent))
        await sync_until(owner, lambda: BACK_TEXT in bodies(owner, room_id))
        await running.idle()
        echoed = Counter(
            a["body"].splitlines()[-1].removeprefix("echo: ") for a in answers_in(events_in(owner, room_id), PUPPET)
        )
        assert all(echoed[t] == 1 for t in sent), echoed
        assert Counter(b for b in bodies(owner, room_id) if b == DOWN_TEXT) == {DOWN_TEXT: 1}
        assert [
            m.text
            for m in running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
            if m.role == "user"
        ] == sent
        assert running.bridge.outage.outages == 1  # one outage, not a loop of them
    finally:
        await owner.close()
        await running.stop()


async def test_a_turn_that_ends_while_the_database_is_down_is_written_down_when_it_is_back(homeserver, tmp_path):
    # the answer is shown, then the database goes just as the turn stores it (the answer, what
    # the agent has seen, the turn done: one transaction): nothing sends that again, so the
    # bridge keeps it and writes it once the database is back. Left undone, the next start
    # would have to finish an answer the owner already has.
    running = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    store, db = running.store, running.store.core.db
    real_answered = store.turns.answered
    went_down: list[bool] = []

    def go_down_then_store(*args, **kwargs):
        # the first try only: a retry already on the database thread when the test puts the
        # database back must not make it read-only again (it would stay so for good)
        if not went_down:
            went_down.append(True)
            db.execute_sql("PRAGMA query_only = 1")  # from here on SQLite refuses every write
        return real_answered(*args, **kwargs)

    try:
        room_id = await open_dm(owner, PUPPET)
        store.turns.answered = go_down_then_store
        try:
            await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": "just before"})
            await sync_until(owner, answered(owner, room_id, ["just before"]))
            # the answer's last edit can reach the owner before the turn's end is written
            await wait_until(lambda: bool(went_down), 60, "the turn's end written")
            assert not running.is_idle()  # the answer and its turn's end could not be written
        finally:
            store.turns.answered = real_answered
            # on the database thread, after every call made before (the one connection is
            # the store's: no call of the store's runs beside this one)
            await running.bridge.db.run(lambda: db.execute_sql("PRAGMA query_only = 0"))
        assert went_down
        await running.idle()  # written when the database is back, without a new message
        channel = store.channel_by_room(room_id)
        asked = [m for m in store.last_messages(channel.id, 50) if m.role == "user"]
        assert store.member(channel.id, "alice").last_seen == asked[-1].id
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": "after"})
        await sync_until(owner, answered(owner, room_id, ["just before", "after"]))
        await running.idle()
    finally:
        await owner.close()
        await running.stop()
    # the next start finds nothing to repair (no answer to mark interrupted, no message to answer)
    again = await start_bridge(homeserver, tmp_path / "bridge", {"alice": agent()})
    try:
        assert again.is_idle()
    finally:
        await again.stop()


def _postgres_processes(cluster) -> list[int]:
    """The server's postmaster and every process it started (backends, background workers)."""
    import subprocess

    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    return [postmaster, *(int(pid) for pid in children)]


@pg
async def test_an_answer_streaming_in_one_room_goes_on_while_the_database_hangs(
    homeserver, restartable_postgres, drop_tables, tmp_path
):
    """PostgreSQL stops answering (its processes paused: queries hang, no error comes) while an
    answer streams in one room and the owner writes in another: the store's calls wait on their
    own thread (store/offloop.py), so the streaming answer keeps being edited meanwhile. On the
    event loop, the first call (the next transaction's key) would have frozen every room."""
    import os
    import signal

    drop_tables(restartable_postgres.url)
    cluster = restartable_postgres.cluster
    bob = "@sk_bob:localhost"
    running = await start_bridge(
        homeserver,
        tmp_path / "bridge",
        {"alice": agent("--answer-size", "3000", "--chunks", "30", "--delay", "0.2"), "bob": agent()},
        database=restartable_postgres.url,
    )
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    paused: list[int] = []
    try:
        streaming = await open_dm(owner, PUPPET)
        other = await open_dm(owner, bob)

        def shown() -> int:
            """How much of the answer's text the owner sees (its status line left out)."""
            answers = answers_in(events_in(owner, streaming), PUPPET)
            body = answers[-1]["body"] if answers else ""
            return len(body.split("\n\n", 1)[1]) if body.startswith(STATUS) and "\n\n" in body else 0

        await owner.room_send(streaming, "m.room.message", {"msgtype": "m.text", "body": "a long one"})
        await sync_until(owner, lambda: shown() > 0)  # its text has begun to stream
        paused = _postgres_processes(cluster)
        for pid in paused:
            os.kill(pid, signal.SIGSTOP)
        at_pause = shown()
        # the owner writes elsewhere: that transaction waits for the database, on its own thread
        await owner.room_send(other, "m.room.message", {"msgtype": "m.text", "body": "meanwhile"})
        await sync_until(owner, lambda: shown() >= at_pause + 500, timeout=60)  # it went on streaming
        assert all(_alive_and_stopped(pid) for pid in paused)  # the database hung all along
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        paused = []
        await sync_until(
            owner,
            lambda: any(a["body"] == "echo: meanwhile" for a in answers_in(events_in(owner, other), bob)),
            timeout=120,
        )
        await running.idle()
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        await owner.close()
        await running.stop()


def _alive_and_stopped(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state == "T"
