"""acp.client's session management (session/list, resume, fork, close) against the scripted
agent, and the capabilities it reads from `agentCapabilities.sessionCapabilities`."""

from __future__ import annotations

import os

import pytest
from acp_helpers import read_log

from acp import AcpError, SessionCapabilities

ALL = ("--session-list", "--session-resume", "--session-fork", "--session-close")


def calls(log_path, method):
    return [m for m in read_log(log_path) if m.get("method") == method]


def test_capabilities_from_the_announcement():
    caps = {"sessionCapabilities": {"list": {}, "resume": {"_meta": {}}, "fork": None, "close": True}}
    assert SessionCapabilities.from_capabilities(caps) == SessionCapabilities(list=True, resume=True)
    assert SessionCapabilities.from_capabilities({}) == SessionCapabilities()
    assert SessionCapabilities.from_capabilities({"sessionCapabilities": "yes"}) == SessionCapabilities()
    assert SessionCapabilities.from_capabilities(None) == SessionCapabilities()


async def test_an_agent_announcing_nothing_is_asked_nothing(spawn, log_path):
    agent = await spawn("--log", str(log_path))
    assert agent.session_capabilities == SessionCapabilities()
    for call in (agent.list_sessions(), agent.resume_session("sess_x"), agent.fork_session("sess_x")):
        with pytest.raises(AcpError, match="cannot"):
            await call
    session_id = await agent.new_session()
    assert await agent.close_session(session_id) is False
    assert session_id not in agent.sessions
    assert not [
        m
        for m in read_log(log_path)
        if m.get("method") in ("session/list", "session/resume", "session/fork", "session/close")
    ]


async def test_list_every_page_for_the_working_directory(spawn, log_path, tmp_path):
    agent = await spawn("--log", str(log_path), "--session-list", "--list-page", "2", cwd=str(tmp_path))
    assert agent.session_capabilities.list
    made = [await agent.new_session() for _ in range(5)]
    listed = await agent.list_sessions()
    assert sorted(s.session_id for s in listed) == sorted(made)
    assert {s.cwd for s in listed} == {str(tmp_path)}
    pages = calls(log_path, "session/list")
    assert len(pages) == 3  # 2 + 2 + 1
    assert [p["params"].get("cursor") for p in pages] == [None, "2", "4"]
    assert all(p["params"]["cwd"] == str(tmp_path) for p in pages)


async def test_resume_goes_on_without_replay(spawn, log_path, tmp_path):
    state = str(tmp_path / "state")
    first = await spawn("--state", state, *ALL)
    session_id = await first.new_session()
    await first.prompt(session_id, "[[title:Plans]] remember me", lambda u: None)
    await first.stop()

    second = await spawn("--state", state, "--log", str(log_path), *ALL)
    listed = await second.list_sessions()
    assert [(s.session_id, s.title) for s in listed] == [(session_id, "Plans")]
    await second.resume_session(session_id)
    assert session_id in second.sessions
    resume = calls(log_path, "session/resume")[0]["params"]
    assert resume["sessionId"] == session_id and os.path.isabs(resume["cwd"]) and resume["mcpServers"] == []
    updates = []
    await second.prompt(session_id, "[[session]]", updates.append)
    # nothing of the old history came as an update: only this answer
    assert [u.text for u in updates if u.kind == "text"] == [f"session {session_id}, prompt 2"]
    with pytest.raises(AcpError):
        await second.resume_session("sess_unknown")


async def test_fork_copies_and_close_forgets(spawn, log_path):
    agent = await spawn("--log", str(log_path), *ALL)
    session_id = await agent.new_session()
    await agent.prompt(session_id, "one", lambda u: None)
    forked = await agent.fork_session(session_id)
    assert forked != session_id and forked in agent.sessions
    updates = []
    await agent.prompt(forked, "[[session]]", updates.append)
    assert [u.text for u in updates if u.kind == "text"] == [f"session {forked}, prompt 2"]
    assert await agent.close_session(forked) is True
    assert forked not in agent.sessions
    assert calls(log_path, "session/close")[0]["params"] == {"sessionId": forked}
