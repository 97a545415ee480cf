"""History that survives (docs/architecture.md "Slots and sessions", "The store", "Faults"):
restarts, session/load, slot eviction, interrupted answers, a store closed under a running answer,
two bridges on one config.

Real Synapse, the real bridge (in-process, or as a `python -m bridge run` subprocess where a
process has to die), scripted agents that log every JSON-RPC message they receive.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import sys
from functools import partial
from pathlib import Path

import pytest
from bridge_harness import agent, answers_in, wait_until, write_config
from helpers import group, is_final, open_dm, prompts, received, say
from matrix_helpers import caught_up, events_in, sync_until

from bridge.channels.recovery.recovery import INTERRUPTED_TEXT as INTERRUPTED
from config.paths import config_hash
from store import Store, StoreClosed

REPO = Path(__file__).resolve().parents[2]
ALICE, BOB, BOT = "@sk_alice:localhost", "@sk_bob:localhost", "@sidekicks:localhost"
CLOSING = "The user now writes to you (answer directly, without your name in front):"


# ---- helpers -------------------------------------------------------------------------------------


def calls(log_path: Path, method: str) -> list[dict]:
    return [m for m in received(log_path) if m.get("method") == method]


def context(channel: str, *lines: str, text: str) -> str:
    return (
        f"[Messages in #{channel} you have not seen yet]\n"
        + "\n".join(lines)
        + f"\n[End of the messages]\n{CLOSING}\n{text}"
    )


def framed_quoted(text: str) -> str:
    """An agent's answer as another agent's prompt quotes it: its lines after the first that would
    read as the bridge's frame (a bracket, the closing sentence, `name:`) behind a backslash."""
    first, *rest = text.split("\n")
    frame = ("[", "user:", "alice:", "bob:", CLOSING)
    return "\n".join([first, *("\\" + line if line.startswith(frame) else line for line in rest)])


def answers(owner, room_id, puppet_id) -> list[dict]:
    return [a for a in answers_in(events_in(owner, room_id), puppet_id) if a["msgtype"] != "m.notice"]


async def wait_answers(owner, room_id, puppet_id, count=1, timeout=60, done=lambda a: True) -> list[dict]:
    def finished():
        found = answers(owner, room_id, puppet_id)
        return len(found) >= count and all(is_final(a) and done(a) for a in found[:count])

    await sync_until(owner, finished, timeout=timeout)
    return answers(owner, room_id, puppet_id)


async def wait_streaming(owner, room_id, puppet_id, index: int, needle: str) -> dict:
    """Until answer `index` shows part of its text under a status line (it is mid-answer)."""

    def streaming():
        found = answers(owner, room_id, puppet_id)
        return len(found) > index and found[index]["body"].startswith("✍️") and needle in found[index]["body"]

    await sync_until(owner, streaming)
    return answers(owner, room_id, puppet_id)[index]


def restarted_notices(owner, room_id) -> list[str]:
    return [
        e["content"].get("body", "")
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and "restart" in e["content"].get("body", "").lower()
    ]


def stored(store, room_id) -> list[tuple[str, str, str]]:
    channel = store.channel_by_room(room_id)
    return [(m.role, m.sender, m.text) for m in store.last_messages(channel.id, 50)]


async def stored_when(store, room_id, count: int, timeout: float = 60) -> list[tuple[str, str, str]]:
    """The channel's stored messages once there are `count` (the final edit lands just before
    the answer is stored)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(found := stored(store, room_id)) < count and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return found


until = partial(wait_until, timeout=60)


def xdg_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "PYTHONUNBUFFERED": "1"}


def default_data_dir(tmp_path: Path, config_path: Path) -> Path:
    """Where `sidekicks run -c config_path` keeps its database with XDG_CONFIG_HOME=tmp/xdg."""
    return tmp_path / "xdg" / "sidekicks" / "data" / config_hash(config_path)


class Subprocess:
    """`python -m bridge run -c CONFIG` in its own process group, output in files."""

    def __init__(self, proc: asyncio.subprocess.Process, out: Path, err: Path):
        self.proc, self.out, self.err = proc, out, err

    @classmethod
    async def start(cls, config_path: Path, tmp_path: Path, name: str) -> Subprocess:
        out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bridge",
                "run",
                "-c",
                str(config_path),
                cwd=REPO,
                env=xdg_env(tmp_path),
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        return cls(proc, out, err)

    async def wait_ready(self, timeout: float = 120) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while "bridge ready" not in self.out.read_text():
            assert self.proc.returncode is None, self.err.read_text()
            assert loop.time() < deadline, self.out.read_text() + self.err.read_text()
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        if self.proc.returncode is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


def _store_conftest():
    """tests/unit/store/conftest.py, for its throwaway PostgreSQL cluster (not a conftest here)."""
    path = Path(__file__).resolve().parents[1] / "unit" / "store" / "conftest.py"
    spec = importlib.util.spec_from_file_location("sidekicks_store_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def postgres_database():
    """A postgresql:// URL with no sk_* tables: $SIDEKICKS_TEST_POSTGRES, else a new cluster."""
    helpers = _store_conftest()
    if os.environ.get(helpers.PG_ENV):
        url, cluster = os.environ[helpers.PG_ENV], None
    else:
        cluster = helpers._Cluster()
        url = cluster.start()
    try:
        helpers._drop_tables(url)
        yield url
    finally:
        if cluster is not None:
            cluster.stop()


# ---- restarts ------------------------------------------------------------------------------------


async def test_restart_agent_with_load_session_gets_its_stored_session(homeserver, bridge_factory, tmp_path, owner):
    log, folder = tmp_path / "alice.log", tmp_path / "bridge"
    alice = agent("--load-session", "--state", str(tmp_path / "sessions"), "--log", str(log))
    running = await bridge_factory({"alice": alice}, folder=folder)
    room_id = await open_dm(owner, ALICE)
    await say(owner, room_id, "one")
    await wait_answers(owner, room_id, ALICE, done=lambda a: a["body"] == "echo: one")
    channel = running.store.channel_by_room(room_id)
    session_id = running.store.member(channel.id, "alice").session_id
    assert session_id
    assert len(calls(log, "session/new")) == 1 and not calls(log, "session/load")

    await running.idle()  # the answer is stored: stopping now cuts nothing
    await running.stop()
    running = await bridge_factory({"alice": alice}, folder=folder)
    await say(owner, room_id, "two")
    found = await wait_answers(owner, room_id, ALICE, count=2, done=lambda a: a["body"].startswith("echo: "))
    # session/load with the stored id, no new session; the replay of "one" shows nowhere
    loads = calls(log, "session/load")
    assert [m["params"]["sessionId"] for m in loads] == [session_id]
    assert len(calls(log, "session/new")) == 1
    assert prompts(log) == ["one", "two"]  # the loaded session remembers: nothing re-sent
    assert [a["body"] for a in found] == ["echo: one", "echo: two"]
    assert running.store.member(channel.id, "alice").session_id == session_id
    assert await stored_when(running.store, room_id, 4) == [
        ("user", homeserver.owner_id, "one"),
        ("agent", "alice", "echo: one"),
        ("user", homeserver.owner_id, "two"),
        ("agent", "alice", "echo: two"),
    ]
    assert restarted_notices(owner, room_id) == []


async def test_a_session_belongs_to_its_working_directory(bridge_factory, tmp_path, owner):
    # the config moved alice to another folder: her stored session (made in the old one) is not
    # loaded, a new one is opened there, told the channel's past; that one is loaded from then on
    log, folder, first, second = tmp_path / "alice.log", tmp_path / "bridge", tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()

    def alice(cwd: Path) -> dict:
        return agent("--load-session", "--state", str(tmp_path / "sessions"), "--log", str(log), cwd=str(cwd))

    running = await bridge_factory({"alice": alice(first)}, folder=folder)
    room_id = await open_dm(owner, ALICE)
    await say(owner, room_id, "one")
    await wait_answers(owner, room_id, ALICE, done=lambda a: a["body"] == "echo: one")
    channel = running.store.channel_by_room(room_id)
    old = running.store.member(channel.id, "alice")
    assert old.session_cwd == str(first)
    await running.idle()
    await running.stop()

    running = await bridge_factory({"alice": alice(second)}, folder=folder)
    await say(owner, room_id, "two")
    await wait_answers(owner, room_id, ALICE, count=2, done=lambda a: a["body"].startswith("echo: "))
    assert not calls(log, "session/load")
    opened = calls(log, "session/new")
    assert [m["params"]["cwd"] for m in opened] == [str(first), str(second)]
    new = running.store.member(channel.id, "alice")
    assert new.session_id != old.session_id and new.session_cwd == str(second)
    told = prompts(log)[1]  # a fresh session: told the channel's past
    assert "user: one\nalice: echo: one\n" in told and told.endswith(f"{CLOSING}\ntwo"), told
    await running.idle()
    await running.stop()

    running = await bridge_factory({"alice": alice(second)}, folder=folder)
    await say(owner, room_id, "three")
    await wait_answers(owner, room_id, ALICE, count=3, done=lambda a: a["body"].startswith("echo: "))
    assert [m["params"]["sessionId"] for m in calls(log, "session/load")] == [new.session_id]
    assert len(calls(log, "session/new")) == 2 and prompts(log)[2] == "three"


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def test_restart_agent_without_load_session_gets_a_fresh_session_told_the_past(
    bridge_factory, tmp_path, request, database, owner
):
    log, folder = tmp_path / "alice.log", tmp_path / "bridge"
    if database == "postgresql":  # the same store code, chosen by `database: postgresql://…`
        database = request.getfixturevalue("postgres_database")
    running = await bridge_factory({"alice": agent("--log", str(log))}, folder=folder, database=database)
    assert running.config.database == database and running.store.in_memory is False
    room_id = await open_dm(owner, ALICE)
    await say(owner, room_id, "one")
    await wait_answers(owner, room_id, ALICE, done=lambda a: a["body"] == "echo: one")
    channel = running.store.channel_by_room(room_id)
    first_session = running.store.member(channel.id, "alice").session_id
    await stored_when(running.store, room_id, 2)
    ids_before = [m.id for m in running.store.last_messages(channel.id, 10)]

    await running.idle()  # the turn is over (stored, seen): stopping now cuts nothing
    await running.stop()
    running = await bridge_factory({"alice": agent("--log", str(log))}, folder=folder, database=database)
    await say(owner, room_id, "two")
    await wait_answers(owner, room_id, ALICE, count=2, done=lambda a: a["body"].startswith("echo: "))
    assert not calls(log, "session/load")
    assert len(calls(log, "session/new")) == 2
    # the fresh session's first prompt carries the channel's last messages, its own answer too
    assert prompts(log) == ["one", context("alice", "user: one", "alice: echo: one", text="two")]
    await stored_when(running.store, room_id, 4)
    await until(lambda: running.store.member(channel.id, "alice").fresh is False)  # seen, after storing
    member = running.store.member(channel.id, "alice")
    assert member.session_id not in (None, first_session) and member.fresh is False
    messages = running.store.last_messages(channel.id, 10)
    assert [m.text for m in messages][:3] == ["one", "echo: one", "two"] and len(messages) == 4
    # ids sort by time, across the restart
    ids = [m.id for m in messages]
    assert ids[:2] == ids_before and ids == sorted(ids) and len(set(ids)) == 4
    assert restarted_notices(owner, room_id) == []


# ---- answers cut by a stop -----------------------------------------------------------------------


def held(release: Path) -> tuple[str, ...]:
    """An answer in 3 parts that stops after the first until `release` exists: it is still
    being written when the test stops the bridge, however slow the machine."""
    return ("--chunks", "3", "--delay", "0.05", "--hold", str(release))


async def answering(bridge_factory, owner, alice: dict, folder: Path):
    """A bridge (in `folder`) whose `alice` (a held agent: `held`) is answering "a long question" in
    a new DM: the running bridge, the room, the answer as shown so far."""
    running = await bridge_factory({"alice": alice}, folder=folder)
    room_id = await open_dm(owner, ALICE)
    await say(owner, room_id, "a long question")
    return running, room_id, await wait_streaming(owner, room_id, ALICE, 0, "echo")


async def test_graceful_stop_during_an_answer_marks_it_interrupted_and_stores_nothing(
    homeserver, bridge_factory, tmp_path, owner
):
    log, folder, release = tmp_path / "alice.log", tmp_path / "bridge", tmp_path / "release"
    alice = agent("--log", str(log), *held(release))
    running, room_id, shown = await answering(bridge_factory, owner, alice, folder)
    await running.stop()
    release.touch()  # answers of the next start are not held
    cut = await wait_answers(owner, room_id, ALICE, done=lambda a: "interrupted" in a["body"])
    body = cut[0]["body"]
    assert body.startswith("echo") and body.endswith("⚠️ interrupted: the bridge stopped")
    assert "echo: a long question" not in body  # cut before its end
    assert shown["body"].split("\n\n", 1)[1] in body

    running = await bridge_factory({"alice": alice}, folder=folder)
    assert stored(running.store, room_id) == [("user", homeserver.owner_id, "a long question")]
    assert running.store.turns.unfinished() == []  # over: nothing for the next start
    await say(owner, room_id, "next")
    found = await wait_answers(
        owner, room_id, ALICE, count=2, done=lambda a: "next" in a["body"] or "interrupted" in a["body"]
    )
    assert found[1]["body"].startswith("echo: ")
    # the fresh session is told the question; the cut answer was never stored, so not told
    assert prompts(log)[-1] == context("alice", "user: a long question", text="next")
    assert found[0]["body"] == body  # not edited a second time
    assert (await stored_when(running.store, room_id, 3))[-1][0:2] == ("agent", "alice")


async def test_killed_bridge_mid_answer_is_repaired_at_next_start(homeserver, bridge_factory, tmp_path, owner):
    log, folder, release = tmp_path / "alice.log", tmp_path / "bridge", tmp_path / "release"
    agents = {"alice": agent("--log", str(log), *held(release))}
    config_path = write_config(homeserver, folder, agents)
    data_dir = default_data_dir(tmp_path, config_path)
    process = await Subprocess.start(config_path, tmp_path, "killed")
    try:
        await process.wait_ready()
        room_id = await open_dm(owner, ALICE)
        await say(owner, room_id, "a long question")
        await wait_streaming(owner, room_id, ALICE, 0, "echo")
        process.kill()  # kill -9: no graceful path at all
        await process.proc.wait()
        release.touch()  # answers of the next start are not held
        await caught_up(owner, room_id)  # everything the killed bridge had sent
        left = answers(owner, room_id, ALICE)[0]
        assert left["body"].startswith("✍️") and "interrupted" not in left["body"]

        running = await bridge_factory(agents, folder=folder, data_dir=data_dir)
        repaired = await wait_answers(owner, room_id, ALICE, done=lambda a: INTERRUPTED in a["body"])
        body = repaired[0]["body"]
        assert body.startswith("echo") and body.endswith(INTERRUPTED)
        assert left["body"].split("\n\n", 1)[1] in body and "✍️" not in body
        assert stored(running.store, room_id) == [("user", homeserver.owner_id, "a long question")]
        assert running.store.turns.unfinished() == []

        await say(owner, room_id, "next")
        found = await wait_answers(
            owner, room_id, ALICE, count=2, done=lambda a: INTERRUPTED in a["body"] or a["body"].startswith("echo: ")
        )
        assert found[1]["body"].startswith("echo: ")
        assert prompts(log)[-1] == context("alice", "user: a long question", text="next")
    finally:
        process.kill()


async def test_store_closed_under_a_running_answer_does_not_crash_the_bridge(
    homeserver, bridge_factory, tmp_path, owner
):
    log, folder, release = tmp_path / "alice.log", tmp_path / "bridge", tmp_path / "release"
    alice = agent("--log", str(log), *held(release))
    running, room_id, _ = await answering(bridge_factory, owner, alice, folder)
    channel_id = running.store.channel_by_room(room_id).id
    running.store.close()  # what quitting does, while the answer still streams
    with pytest.raises(StoreClosed, match="store is closed"):
        running.store.member(channel_id, "alice")
    release.touch()
    # the answer still ends on Matrix; storing it raises StoreClosed, which is contained
    await wait_answers(owner, room_id, ALICE, done=lambda a: a["body"] == "echo: a long question")
    portal = running.bridge.portals[room_id]
    worker = portal.lines[""].worker  # the main timeline's
    await asyncio.wait_for(asyncio.shield(worker), 60)
    assert worker.exception() is None and portal.current is None
    await running.stop()  # and stopping afterwards is clean

    # it was never stored: the next start says on Matrix that it was interrupted
    running = await bridge_factory({"alice": alice}, folder=folder)
    found = await wait_answers(owner, room_id, ALICE, done=lambda a: INTERRUPTED in a["body"])
    assert found[0]["body"] == f"echo: a long question\n\n{INTERRUPTED}"
    assert stored(running.store, room_id) == [("user", homeserver.owner_id, "a long question")]


# ---- slots ---------------------------------------------------------------------------------------


async def test_evicted_agents_come_back_like_after_a_restart(bridge_factory, tmp_path, owner):
    alice_log, bob_log = tmp_path / "alice.log", tmp_path / "bob.log"
    running = await bridge_factory(
        {
            "alice": agent("--load-session", "--state", str(tmp_path / "sessions"), "--log", str(alice_log)),
            "bob": agent("--log", str(bob_log)),
        },
        limits={"agents_in_memory": 1},
    )
    pool = running.bridge.pool
    room_id = await group(owner, ALICE, BOB)
    channel = running.store.channel_by_room(room_id)
    await say(owner, room_id, "@alice one")
    await wait_answers(owner, room_id, ALICE)
    alice_session = running.store.member(channel.id, "alice").session_id
    assert pool.state("alice") == "ready" and pool.state("bob") == "stopped"

    await say(owner, room_id, "@bob two")
    await wait_answers(owner, room_id, BOB)
    assert pool.state("alice") == "stopped" and pool.state("bob") == "ready"  # alice made room
    bob_session = running.store.member(channel.id, "bob").session_id

    await say(owner, room_id, "@alice three")
    await wait_answers(owner, room_id, ALICE, count=2)
    assert pool.state("alice") == "ready" and pool.state("bob") == "stopped"
    # alice announces loadSession: her stored session is loaded, and she is told only what
    # she has not seen (bob's turn), not her own answer
    assert [m["params"]["sessionId"] for m in calls(alice_log, "session/load")] == [alice_session]
    assert len(calls(alice_log, "session/new")) == 1
    bob_answer = answers(owner, room_id, BOB)[0]["body"]
    assert prompts(alice_log) == [
        "@alice one",
        context("general", "user: @bob two", f"bob: {framed_quoted(bob_answer)}", text="@alice three"),
    ]

    await say(owner, room_id, "@bob four")
    await wait_answers(owner, room_id, BOB, count=2)
    # bob has no session/load: a new, fresh session whose first prompt carries the channel's
    # last messages, his own answer included
    assert not calls(bob_log, "session/load") and len(calls(bob_log, "session/new")) == 2
    await stored_when(running.store, room_id, 8)
    await until(lambda: running.store.member(channel.id, "bob").fresh is False)  # seen, after storing
    member = running.store.member(channel.id, "bob")
    assert member.session_id != bob_session and member.fresh is False
    alice_answers = [a["body"] for a in answers(owner, room_id, ALICE)]
    assert prompts(bob_log)[-1] == context(
        "general",
        "user: @alice one",
        f"alice: {framed_quoted(alice_answers[0])}",
        "user: @bob two",
        f"bob: {framed_quoted(bob_answer)}",
        "user: @alice three",
        f"alice: {framed_quoted(alice_answers[1])}",
        text="@bob four",
    )
    assert restarted_notices(owner, room_id) == []


# ---- two bridges, one database -------------------------------------------------------------------


async def test_second_bridge_on_the_same_config_stops_with_one_line(homeserver, bridge_factory, tmp_path, owner):
    folder = tmp_path / "bridge"
    agents = {"alice": agent()}
    config_path = write_config(homeserver, folder, agents)
    data_dir = default_data_dir(tmp_path, config_path)
    running = await bridge_factory(agents, folder=folder, data_dir=data_dir)
    room_id = await open_dm(owner, ALICE)
    second = await Subprocess.start(config_path, tmp_path, "second")
    assert await asyncio.wait_for(second.proc.wait(), 30) == 1
    lines = second.err.read_text().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("sidekicks: another bridge is already running for this config")
    assert "database is in use" in lines[0] and str(homeserver.as_port) in lines[0]
    assert "Traceback" not in second.out.read_text()
    # the first bridge is untouched and keeps its history
    await say(owner, room_id, "still there?")
    await wait_answers(owner, room_id, ALICE, done=lambda a: a["body"] == "echo: still there?")
    assert (await stored_when(running.store, room_id, 2))[-1] == ("agent", "alice", "echo: still there?")
    assert running.store.in_memory is False


async def test_database_held_by_another_bridge_gives_an_in_memory_store_and_owner_is_told(
    bridge_factory, tmp_path, owner
):
    data_dir = tmp_path / "data"
    holder = Store.open("sqlite", data_dir)  # another running bridge holds the database
    try:
        running = await bridge_factory({"alice": agent()}, data_dir=data_dir)
        assert running.bridge.history_unavailable is True and running.store.in_memory is True

        def told() -> list[str]:
            rooms = list(owner.rooms) + list(owner.invited_rooms)
            return [
                e["content"].get("body", "")
                for room in rooms
                for e in events_in(owner, room)
                if e.get("sender") == BOT
                and e.get("type") == "m.room.message"
                and "History is unavailable" in e["content"].get("body", "")
            ]

        async def join_invites():
            for room_id in list(owner.invited_rooms):
                await owner.join(room_id)

        await sync_until(owner, lambda: bool(owner.invited_rooms) or bool(told()))
        await join_invites()
        await sync_until(owner, lambda: bool(told()))
        assert "another running bridge" in told()[0]

        # the bridge still works, on its in-memory store, and the held database is not touched
        room_id = await open_dm(owner, ALICE)
        await say(owner, room_id, "hi")
        await wait_answers(owner, room_id, ALICE, done=lambda a: a["body"] == "echo: hi")
        assert (await stored_when(running.store, room_id, 2))[-1] == ("agent", "alice", "echo: hi")
        assert holder.channels() == []
    finally:
        holder.close()
