"""session/new's additionalDirectories (ACP sessionCapabilities.additionalDirectories), against
the scripted agent: sent only to an agent that announces it takes them, as absolute paths; the
session works in its `cwd` either way."""

from __future__ import annotations

from acp_helpers import read_log


def new_sessions(log_path):
    return [m["params"] for m in read_log(log_path) if m.get("method") == "session/new"]


async def test_the_other_roots_go_to_an_agent_that_announces_it_takes_them(spawn, log_path, tmp_path):
    agent = await spawn("--log", str(log_path), "--additional-directories")
    assert agent.takes_directories
    session_id = await agent.new_session(str(tmp_path), [], additional_directories=[str(tmp_path / "notes")])
    updates = []
    await agent.prompt(session_id, "[[session-cwd]]", updates.append)
    assert [u.text for u in updates if u.kind == "text"] == [str(tmp_path)]
    assert new_sessions(log_path) == [
        {"cwd": str(tmp_path), "mcpServers": [], "additionalDirectories": [str(tmp_path / "notes")]}
    ]


async def test_an_agent_that_does_not_announce_it_never_gets_them(spawn, log_path, tmp_path):
    agent = await spawn("--log", str(log_path))
    assert not agent.takes_directories
    await agent.new_session(str(tmp_path), [], additional_directories=[str(tmp_path / "notes")])
    await agent.new_session(str(tmp_path), [])
    assert new_sessions(log_path) == [{"cwd": str(tmp_path), "mcpServers": []}] * 2
