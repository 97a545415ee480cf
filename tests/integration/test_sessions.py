"""Sessions the owner sees and changes, end to end: real Synapse, the owner's matrix-nio client,
the real bridge in-process, two scripted agents that log every JSON-RPC message they receive —
alice announces session/list, resume, fork and close (and loadSession), bob only loadSession.

`!sessions` lists each member's sessions of the conversation; `!resume N` goes back to one
(alice: session/resume, bob: session/load) and the next prompt goes to it; `!reset` starts a new
one; `!fork` goes on with a copy in a new thread (bob: one line saying it cannot); redacting a
thread's root and deleting the channel close their sessions; after a restart a stored session is
resumed, not loaded, when the agent offers both.
"""

from __future__ import annotations

import re

from bridge_harness import agent, answers_in, wait_until
from helpers import ALICE, BOB, in_thread, is_final, open_dm, received, say, thread_of
from matrix_helpers import events_in, sync_until
from test_channels import group

SESSIONS = ("--session-list", "--session-resume", "--session-fork", "--session-close")


def calls(log, method) -> list[dict]:
    return [m["params"] for m in received(log) if m.get("method") == method]


def said_by_bridge(owner, room_id) -> list[dict]:
    """The notices the puppets posted in the room (command replies), oldest first."""
    return [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message"
        and e["content"].get("msgtype") == "m.notice"
        and e.get("sender") in (ALICE, BOB)
    ]


async def command(owner, room_id, text, thread: str = "", starts: str = "") -> str:
    """Send a command (into `thread`, if given) and return the next notice (starting with
    `starts`) posted in that conversation."""
    before = {e["event_id"] for e in said_by_bridge(owner, room_id)}
    await say(owner, room_id, text, **(in_thread(thread, thread) if thread else {}))

    def new():
        return [
            e
            for e in said_by_bridge(owner, room_id)
            if e["event_id"] not in before
            and thread_of(e) == thread
            and e["content"]["body"].startswith(starts)
            and not e["content"]["body"].startswith("Forked from")
        ]

    await sync_until(owner, lambda: new(), timeout=60)
    return new()[0]["content"]["body"]


async def answer(owner, room_id, sender, text, thread: str = "") -> str:
    """Say `text` (into `thread`) and return the final body of `sender`'s next answer."""
    before = {a["event_id"] for a in answers_in(events_in(owner, room_id), sender)}
    await say(owner, room_id, text, **(in_thread(thread, thread) if thread else {}))

    def new():
        return [
            a
            for a in answers_in(events_in(owner, room_id), sender)
            if a["event_id"] not in before and a["msgtype"] != "m.notice"
        ]

    await sync_until(owner, lambda: new() and is_final(new()[0]), timeout=60)
    return new()[0]["body"]


def session_of(body: str) -> tuple[str, int]:
    """(session id, prompts so far) from an answer to [[session]]."""
    found = re.search(r"session (\S+), prompt (\d+)", body)
    assert found, body
    return found.group(1), int(found.group(2))


async def test_sessions_are_listed_resumed_reset_forked_and_closed(bridge_factory, tmp_path, owner):
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    running = await bridge_factory(
        {
            "alice": agent(
                "--echo-last-line",
                "--load-session",
                *SESSIONS,
                "--state",
                str(tmp_path / "alice"),
                "--log",
                str(logs["alice"]),
                title="Alice",
            ),
            "bob": agent(
                "--echo-last-line",
                "--load-session",
                "--state",
                str(tmp_path / "bob"),
                "--log",
                str(logs["bob"]),
                title="Bob",
            ),
        }
    )
    room_id = await group(owner, ALICE, BOB)
    store = running.store

    # bob first: a prompt carries what the agent has not seen, and alice's title is for her only
    first_bob = session_of(await answer(owner, room_id, BOB, "@bob first question [[session]]"))[0]
    first_alice = session_of(await answer(owner, room_id, ALICE, "@alice [[title:Trip plans]] [[session]]"))[0]
    await running.idle()
    listing = await command(owner, room_id, "!sessions")
    assert "Alice (@alice), sessions here:\n  1. Trip plans — just now ← current" in listing, listing
    assert "Bob (@bob), sessions here:\n  1. @bob first question [[session]] — just now ← current" in listing, listing
    assert calls(logs["alice"], "session/list") and not calls(logs["bob"], "session/list")

    # !reset: the next prompt goes to a new session; the one left is closed (alice can close)
    assert (await command(owner, room_id, "!reset alice")).startswith("Alice starts a new session here")
    second_alice, count = session_of(await answer(owner, room_id, ALICE, "@alice [[session]]"))
    assert second_alice != first_alice and count == 1
    assert [c["sessionId"] for c in calls(logs["alice"], "session/close")] == [first_alice]
    await running.idle()
    listing = await command(owner, room_id, "!sessions @alice")
    assert re.search(r"1\. .* ← current\n  2\. Trip plans — ", listing), listing
    assert "Bob" not in listing

    # !resume: alice resumes the first session (nothing replayed), the next prompt goes there
    assert await command(owner, room_id, "!resume alice 2") == "Alice goes on in session 2 (Trip plans)."
    assert [c["sessionId"] for c in calls(logs["alice"], "session/resume")] == [first_alice]
    assert not calls(logs["alice"], "session/load")
    assert session_of(await answer(owner, room_id, ALICE, "@alice [[session]]")) == (first_alice, 2)
    channel = store.channel_by_room(room_id)
    assert store.member(channel.id, "alice").session_id == first_alice

    # bob cannot resume: !resume loads
    await command(owner, room_id, "!reset bob")
    second_bob = session_of(await answer(owner, room_id, BOB, "@bob [[session]]"))[0]
    assert second_bob != first_bob
    await running.idle()
    assert (await command(owner, room_id, "!resume 2 bob")).startswith("Bob goes on in session 2")
    assert [c["sessionId"] for c in calls(logs["bob"], "session/load")] == [first_bob]
    assert not calls(logs["bob"], "session/resume") and not calls(logs["bob"], "session/close")
    assert session_of(await answer(owner, room_id, BOB, "@bob [[session]]")) == (first_bob, 2)
    await running.idle()

    # !fork: a new thread under alice's line, answered from a copy of her session
    before = {e["event_id"] for e in said_by_bridge(owner, room_id)}
    await say(owner, room_id, "!fork alice")
    await sync_until(
        owner,
        lambda: [
            e
            for e in said_by_bridge(owner, room_id)
            if e["event_id"] not in before and e["content"]["body"].startswith("Forked from the main timeline")
        ],
    )
    root = next(
        e
        for e in said_by_bridge(owner, room_id)
        if e["event_id"] not in before and e["content"]["body"].startswith("Forked from")
    )
    assert root["sender"] == ALICE and thread_of(root) == ""
    # the line is posted first, then the session forked: the fork is in the log once it is stored
    await wait_until(
        lambda: (m := store.member(channel.id, "alice", root["event_id"])) is not None and m.session_id is not None,
        what="the forked session stored",
    )
    assert [c["sessionId"] for c in calls(logs["alice"], "session/fork")] == [first_alice]
    forked = store.member(channel.id, "alice", root["event_id"]).session_id
    # unaddressed in the new thread: alice (its root is hers), in the copy (two prompts copied)
    body = await answer(owner, room_id, ALICE, "[[session]]", thread=root["event_id"])
    assert session_of(body) == (forked, 3) and forked != first_alice
    last = [a for a in answers_in(events_in(owner, room_id), ALICE) if a["msgtype"] != "m.notice"][-1]
    assert (
        thread_of(next(e for e in events_in(owner, room_id) if e.get("event_id") == last["event_id"]))
        == root["event_id"]
    )
    listing = await command(owner, room_id, "!sessions alice", thread=root["event_id"])
    assert "sessions in this thread:\n  1. fork of Trip plans — just now ← current" in listing, listing
    assert "fork of" not in await command(owner, room_id, "!sessions alice")  # not the main timeline's
    # bob cannot fork: one line
    assert await command(owner, room_id, "!fork bob") == "Bob cannot fork sessions (it offers no session/fork)."
    await running.idle()

    # the thread's root redacted: its session is closed and forgotten
    await owner.room_redact(room_id, root["event_id"])
    await wait_until(lambda: forked in [c["sessionId"] for c in calls(logs["alice"], "session/close")])
    assert store.member(channel.id, "alice", root["event_id"]).session_id is None

    # the channel deleted: every member session closed where the agent can close them
    closed = len(calls(logs["alice"], "session/close"))
    await command(owner, room_id, "!delete confirm", starts="Deleted the history")
    await wait_until(lambda: len(calls(logs["alice"], "session/close")) > closed)
    assert first_alice in [c["sessionId"] for c in calls(logs["alice"], "session/close")[closed:]]
    assert not calls(logs["bob"], "session/close")


async def test_after_a_restart_a_stored_session_is_resumed_not_loaded(bridge_factory, tmp_path, owner):
    log, folder = tmp_path / "alice.log", tmp_path / "bridge"
    alice = agent("--load-session", *SESSIONS, "--state", str(tmp_path / "sessions"), "--log", str(log))
    running = await bridge_factory({"alice": alice}, folder=folder)
    room_id = await open_dm(owner, ALICE)
    assert await answer(owner, room_id, ALICE, "one") == "echo: one"
    channel = running.store.channel_by_room(room_id)
    session_id = running.store.member(channel.id, "alice").session_id
    await running.idle()
    await running.stop()

    running = await bridge_factory({"alice": alice}, folder=folder)
    assert await answer(owner, room_id, ALICE, "[[session]]") == f"session {session_id}, prompt 2"
    assert [c["sessionId"] for c in calls(log, "session/resume")] == [session_id]
    assert not calls(log, "session/load") and len(calls(log, "session/new")) == 1


async def test_a_kicked_agents_sessions_are_not_listed_in_another_room(bridge_factory, tmp_path, owner):
    """alice is kicked from #general: her session there is not in the list `!sessions` shows in
    her direct room, not even as another client's (docs/SECURITY.md "Limits")."""
    running = await bridge_factory(
        {
            "alice": agent(
                "--echo-last-line",
                *SESSIONS,
                "--state",
                str(tmp_path / "alice"),
                "--log",
                str(tmp_path / "alice.log"),
                title="Alice",
            )
        }
    )
    room_id = await group(owner, ALICE)
    await answer(owner, room_id, ALICE, "@alice [[title:Secret plans]] [[session]]")
    channel = running.store.channel_by_room(room_id)
    await owner.room_kick(room_id, ALICE)
    await wait_until(lambda: running.store.member(channel.id, "alice") is None, what="alice is no member any more")
    dm = await open_dm(owner, ALICE)
    await answer(owner, dm, ALICE, "hello [[session]]")
    listing = await command(owner, dm, "!sessions")
    assert "Alice (@alice), sessions here:" in listing and "Secret plans" not in listing, listing
