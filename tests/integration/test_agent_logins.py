"""An agent that wants a login (docs/sessions.md "Logins"): real Synapse, the real bridge
in-process, the scripted agent refusing `session/new` with `auth_required` (-32000) until its
login file exists. The owner reads one line saying what to do — the command to run once for a
`terminal` method; for an `agent` method the bridge calls `authenticate` itself — and the message
that met the login is answered once, after the login, not lost. An agent whose login asks for a
page (tests/agents/login_agent.py: a URL elicitation during `authenticate`, or a line on its
stderr) gets the owner the page's host first, then the link; a login that fails says so in one
line and the message still waits.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bridge_harness import SCRIPTED, agent, answers_in
from helpers import ALICE, open_dm, received, say
from matrix_helpers import events_in, sync_until

from store.turns import DONE

LOGIN_AGENT = Path(__file__).resolve().parents[1] / "agents" / "login_agent.py"
WAITS = "your message waits and is answered once it is logged in."


def login_agent(*options: str) -> dict:
    return {"command": [sys.executable, str(LOGIN_AGENT), *options]}


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


async def asked_and_answered(bridge_factory, tmp_path, owner, how: str, url: str, line: str) -> list[dict]:
    """The login agent asks for `url` (`how`: --ask-url or --stderr-url) during `authenticate`:
    the owner reads `line`, finishes on the page, and the message is answered once. Its log."""
    log, done = tmp_path / "alice.log", tmp_path / "owner-done"
    running = await bridge_factory({"alice": login_agent("--log", str(log), how, url, "--hold", str(done))})
    try:
        room_id = await open_dm(owner)
        await say(owner, room_id, "hello")
        await sync_until(owner, lambda: any(line in b for b in bodies(owner, room_id)), timeout=60)
        assert [m["params"] for m in received(log) if m.get("method") == "authenticate"] == [
            {"methodId": "browser-login"}
        ]
        assert not finals(owner, room_id)
        done.touch()  # the owner finished on the page
        await sync_until(owner, lambda: finals(owner, room_id), timeout=60)
        await running.idle()
        assert len(finals(owner, room_id)) == 1
        assert len([m for m in received(log) if m.get("method") == "session/prompt"]) == 1
        return received(log)
    finally:
        done.touch()


async def test_a_page_the_agent_asks_for_while_logging_in_is_shown_by_its_host_then_answered(
    bridge_factory, tmp_path, owner
):
    url = "https://Login.Example.com/device?code=WXYZ-1234"
    line = (
        "🔑 alice is logging in (Log in with a browser): open a page on login.example.com: "
        f"https://login.example.com/device?code=WXYZ-1234 (Sign in to continue); {WAITS}"
    )
    log = await asked_and_answered(bridge_factory, tmp_path, owner, "--ask-url", url, line)
    assert [m["elicitation-answer"] for m in log if "elicitation-answer" in m] == [{"action": "accept"}]


async def test_a_page_the_agent_prints_on_stderr_while_logging_in_is_shown_by_its_host(bridge_factory, tmp_path, owner):
    url = "https://auth.example.org/oauth/authorize?client_id=abc&state=xyz"
    line = (
        "🔑 alice is logging in (Log in with a browser): open a page on auth.example.org: "
        f"{url} (To log in, open in a browser); {WAITS}"
    )
    await asked_and_answered(bridge_factory, tmp_path, owner, "--stderr-url", url, line)


async def test_a_failed_agent_login_is_one_line_and_the_message_still_waits(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": login_agent("--log", str(log), "--fail")})
    room_id = await open_dm(owner)
    await say(owner, room_id, "hello")
    line = (
        "🔑 alice could not log in (Log in with a browser): Login failed: the page was closed "
        f"(JSON-RPC error -32603); {WAITS[:-1]} (log in with it on this machine, or `!stop` and send it again"
    )
    await sync_until(owner, lambda: any(line in b for b in bodies(owner, room_id)), timeout=60)
    tries = len([m for m in received(log) if m.get("method") == "session/new"])
    await sync_until(  # the message is kept: its session is still tried
        owner, lambda: len([m for m in received(log) if m.get("method") == "session/new"]) > tries, timeout=60
    )
    assert not finals(owner, room_id)
    channel = running.store.channel_by_room(room_id)
    assert [t.text for t in running.store.turns.in_channel(channel.id)] == ["hello"]
