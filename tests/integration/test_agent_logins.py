"""An agent that wants a login (docs/sessions.md "Logins"): real Synapse, the real bridge
in-process, the scripted agent refusing `session/new` with `auth_required` (-32000) until its
login file exists. The owner reads one line saying what to do — the command to run once for a
`terminal` method; for an `agent` method the bridge calls `authenticate` itself — and the message
that met the login is answered once, after the login, not lost.
"""

from __future__ import annotations

import sys

from bridge_harness import SCRIPTED, agent, answers_in
from helpers import ALICE, open_dm, received, say
from matrix_helpers import events_in, sync_until

from store.turns import DONE


def bodies(owner, room_id: str) -> list[str]:
    return [h for a in answers_in(events_in(owner, room_id), ALICE) for h in a["history"]]


def finals(owner, room_id: str) -> list[str]:
    return [a["body"] for a in answers_in(events_in(owner, room_id), ALICE) if a["body"] == "echo: hello"]


async def test_a_terminal_login_is_told_as_its_command_and_the_message_answered_once_logged_in(
    bridge_factory, tmp_path, owner
):
    login, log = tmp_path / "logged-in", tmp_path / "alice.log"
    options = ("--log", str(log), "--auth", "--auth-type", "terminal", "--login-file", str(login))
    running = await bridge_factory({"alice": agent(*options)})
    room_id = await open_dm(owner)
    await say(owner, room_id, "hello")
    command = " ".join([sys.executable, str(SCRIPTED), *options, "--login"])
    line = f"🔑 alice needs a login: run once on this machine `{command}` (Scripted login);"
    await sync_until(owner, lambda: any(line in b for b in bodies(owner, room_id)), timeout=60)
    login.touch()  # the owner ran the command
    await sync_until(owner, lambda: finals(owner, room_id), timeout=60)
    await running.idle()
    assert len(finals(owner, room_id)) == 1
    prompts = [m for m in received(log) if m.get("method") == "session/prompt"]
    assert len(prompts) == 1
    channel = running.store.channel_by_room(room_id)
    assert [(t.text, t.state) for t in running.store.turns.in_channel(channel.id)] == [("hello", DONE)]


async def test_an_agent_login_is_run_by_the_bridge_and_the_message_answered(bridge_factory, tmp_path, owner):
    login, log, done = tmp_path / "logged-in", tmp_path / "alice.log", tmp_path / "owner-done"
    options = (
        "--log",
        str(log),
        "--auth",
        "--auth-type",
        "agent",
        "--login-file",
        str(login),
        "--auth-hold",
        str(done),
    )
    running = await bridge_factory({"alice": agent(*options)})
    try:
        room_id = await open_dm(owner)
        await say(owner, room_id, "hello")
        line = "🔑 alice needs a login: it is logging in (Scripted login), follow what it asks;"
        await sync_until(owner, lambda: any(line in b for b in bodies(owner, room_id)), timeout=60)
        authenticated = [m for m in received(log) if m.get("method") == "authenticate"]
        assert [m["params"] for m in authenticated] == [{"methodId": "scripted-login"}]
        done.touch()  # the owner did what the agent asked
        await sync_until(owner, lambda: finals(owner, room_id), timeout=60)
        await running.idle()
        assert len(finals(owner, room_id)) == 1
        assert login.read_text() == "logged in by authenticate\n"
    finally:
        done.touch()
