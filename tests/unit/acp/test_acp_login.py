"""An `agent` login (acp/client.py `Agent.authenticate`, docs/sessions.md "Logins"): what the agent
asks while `authenticate` runs reaches the caller — a request-scoped URL elicitation (accepted), a
link on a line of its stderr — each page once; the call is bound by its own wait, not by the
silence limit, and withdrawn at the agent when that wait ends."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from acp_helpers import read_log, until

from acp import AgentSpec, AgentTimeout, start_agent
from acp.client import LOGIN_ASKS, _Login

LOGIN_AGENT = str(Path(__file__).resolve().parents[2] / "agents" / "login_agent.py")


async def test_the_pages_a_login_asks_for_reach_the_caller_and_the_wait_is_its_own(tmp_path):
    log, asked = tmp_path / "agent.jsonl", []
    options = ["--log", str(log), "--ask-url", "https://login.example.com/a", "--hold", str(tmp_path / "never")]
    options += ["--stderr-url", "https://login.example.com/a"]  # the same page again: told once
    agent = await start_agent(AgentSpec(name="alice", command=[sys.executable, LOGIN_AGENT, *options]))
    try:
        agent.spec.timeout = 0.2  # the silence limit does not end a login: a person is at it
        with pytest.raises(AgentTimeout) as err:
            await agent.authenticate("browser-login", lambda safe, said: asked.append((safe, said)), wait=2.0)
        assert not err.value.killed and agent.returncode is None
        assert asked == [(("https://login.example.com/a", "login.example.com"), "Sign in to continue")]
        assert [m["elicitation-answer"] for m in read_log(log) if "elicitation-answer" in m] == [{"action": "accept"}]
        authenticate = next(m for m in read_log(log) if m.get("method") == "authenticate")
        await until(
            lambda: (
                {"method": "$/cancel_request", "params": {"requestId": authenticate["id"]}}.items()
                <= next((m for m in read_log(log) if m.get("method") == "$/cancel_request"), {}).items()
            ),
            what="the login withdrawn at the agent",
        )
    finally:
        await agent.stop()


async def test_a_logins_stderr_is_read_by_whole_lines_and_each_page_told_once():
    asked: list = []
    login = _Login(asyncio.get_running_loop().create_future(), lambda safe, said: asked.append((safe, said)))
    login.stderr(b"starting\nTo log in, open https://a.example/x")
    assert asked == []  # the line is not whole yet
    login.stderr(b"?c=1 in a browser\nagain: https://a.example/x?c=1\n")
    assert asked == [(("https://a.example/x?c=1", "a.example"), "To log in, open   in a browser")]
    login.stderr(b"".join(f"https://p{n}.example/\n".encode() for n in range(10)))
    assert len(asked) == LOGIN_ASKS


async def test_a_form_during_a_login_is_declined_and_a_bad_link_told_as_none():
    asked: list = []
    login = _Login(asyncio.get_running_loop().create_future(), lambda safe, said: asked.append((safe, said)))
    form = {
        "requestId": 1,
        "mode": "form",
        "message": "Your API key",
        "requestedSchema": {"properties": {"k": {"type": "string"}}},
    }
    assert login.elicitation(form) == {"action": "decline"}
    url = {"requestId": 1, "mode": "url", "elicitationId": "e", "url": "https://user@evil.example/", "message": "m"}
    assert login.elicitation(url) == {"action": "accept"}
    assert asked == [(None, "m")]


async def test_two_logins_at_once_share_one_authenticate(tmp_path):
    log, done = tmp_path / "agent.jsonl", tmp_path / "done"
    command = [sys.executable, LOGIN_AGENT, "--log", str(log), "--hold", str(done)]
    agent = await start_agent(AgentSpec(name="alice", command=command))
    try:
        logins = [asyncio.ensure_future(agent.authenticate("browser-login")) for _ in range(2)]
        await until(lambda: any(m.get("method") == "authenticate" for m in read_log(log)), what="authenticate")
        done.touch()
        await asyncio.wait_for(asyncio.gather(*logins), 60)
        assert len([m for m in read_log(log) if m.get("method") == "authenticate"]) == 1
        await agent.new_session()  # logged in
    finally:
        await agent.stop()
