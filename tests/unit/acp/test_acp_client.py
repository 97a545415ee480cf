"""acp.client against the scripted agent, one real process per test."""

from __future__ import annotations

import asyncio
import os

import pytest
from acp_helpers import PATIENCE, log_until, read_log, scripted_spec, until

from acp import (
    AcpError,
    AgentCrashed,
    AgentStartError,
    AgentTimeout,
    AuthRequired,
    PermissionRequest,
    RpcError,
    start_agent,
)


async def ask(agent, text, on_permission=None, session_id=None):
    """One prompt in a (new) session: (stopReason, updates)."""
    session_id = session_id or await agent.new_session()
    updates = []
    stop = await agent.prompt(session_id, text, updates.append, on_permission)
    return stop, updates


def texts(updates, kind="text"):
    return [u.text for u in updates if u.kind == kind]


async def test_initialize_reports_agent_info(spawn, log_path):
    agent = await spawn("--log", str(log_path), "--name", "scripty", "--version", "2.5", "--title", "Scripty")
    assert agent.info == {"name": "scripty", "version": "2.5", "title": "Scripty"}
    assert agent.protocol_version == 1
    assert not agent.load_session and agent.auth_methods == [] and agent.commands is None
    init = read_log(log_path)[0]
    assert init["method"] == "initialize"
    assert init["params"]["protocolVersion"] == 1
    assert init["params"]["clientCapabilities"] == {
        "fs": {"readTextFile": False, "writeTextFile": False},
        "terminal": False,
    }
    assert init["params"]["clientInfo"]["name"] == "sidekicks-matrix"


async def test_streamed_text_arrives_in_order(spawn, log_path, tmp_path):
    agent = await spawn("--log", str(log_path), "--chunks", "5")
    session_id = await agent.new_session(str(tmp_path))
    assert session_id in agent.sessions
    stop, updates = await ask(agent, "hello streaming world", session_id=session_id)
    assert stop == "end_turn"
    assert len(texts(updates)) == 5
    assert "".join(texts(updates)) == "echo: hello streaming world"
    log = read_log(log_path)
    new = next(m for m in log if m.get("method") == "session/new")
    assert new["params"] == {"cwd": str(tmp_path), "mcpServers": []}
    prompt = next(m for m in log if m.get("method") == "session/prompt")
    assert prompt["params"] == {"sessionId": session_id, "prompt": [{"type": "text", "text": "hello streaming world"}]}


async def test_thoughts_come_before_text(spawn):
    agent = await spawn("--thoughts", "--answer", "done")
    stop, updates = await ask(agent, "think")
    assert [u.kind for u in updates] == ["thought", "text"]
    assert updates[0].text == "Let me think about that." and updates[1].text == "done"


async def test_tool_call_and_its_updates(spawn):
    agent = await spawn("--tool-call")
    _, updates = await ask(agent, "use a tool")
    tools = [u for u in updates if u.kind.startswith("tool_call")]
    assert [(u.kind, u.tool_call_id, u.status) for u in tools] == [
        ("tool_call", "call_1", "pending"),
        ("tool_call_update", "call_1", "in_progress"),
        ("tool_call_update", "call_1", "completed"),
    ]
    assert tools[0].title == "Read notes.txt" and tools[0].raw["kind"] == "read"


async def test_tool_call_update_without_a_tool_call(spawn):
    agent = await spawn("--tool-update-only")
    stop, updates = await ask(agent, "ghost")
    assert stop == "end_turn"
    assert [(u.kind, u.tool_call_id, u.title, u.status) for u in updates[:1]] == [
        ("tool_call_update", "call_ghost", "Ghost tool", "completed")
    ]


async def test_plan(spawn):
    agent = await spawn("--plan")
    _, updates = await ask(agent, "plan it")
    plan = [u for u in updates if u.kind == "plan"]
    assert len(plan) == 1 and [e["status"] for e in plan[0].raw["entries"]] == ["completed", "in_progress"]


async def test_commands_before_session_new_returns_and_later(spawn):
    calls, returned = [], []

    def on_commands(name, commands):
        calls.append((name, [c["name"] for c in commands], bool(returned)))

    agent = await spawn(
        "--commands",
        "review:Review code:what to review,help:Help",
        "--commands-later",
        "deploy:Deploy",
        on_commands=on_commands,
    )
    session_id = await agent.new_session()
    returned.append(True)
    assert calls == [("alice", ["review", "help"], False)]  # before session/new returned
    assert agent.commands[0] == {"name": "review", "description": "Review code", "input": {"hint": "what to review"}}
    await until(lambda: len(calls) > 1, what="the later update (outside any prompt) arrived")
    assert calls[1] == ("alice", ["deploy"], True)
    assert [c["name"] for c in agent.commands] == ["deploy"]
    # ... and one during a prompt reaches on_update too.
    _, updates = await ask(agent, "[[commands:lint:Lint]]", session_id=session_id)
    assert [u.kind for u in updates][:1] == ["commands"]
    assert calls[-1] == ("alice", ["lint"], True)


async def test_permission_allowed_and_rejected(spawn, log_path):
    agent = await spawn("--permission", "--log", str(log_path))
    seen: list[PermissionRequest] = []

    async def allow(request):
        seen.append(request)
        return "allow_once"

    async def reject(request):
        return "reject_once"

    stop, updates = await ask(agent, "write please", allow)
    assert (stop, texts(updates)) == ("end_turn", ["allowed"])
    assert seen[0].tool_call["toolCallId"] == "call_perm" and seen[0].tool_call["title"] == "Write notes.txt"
    assert [o["optionId"] for o in seen[0].options] == ["allow_once", "reject_once"]
    assert seen[0].session_id in agent.sessions
    stop, updates = await ask(agent, "write again", reject)
    assert (stop, texts(updates)) == ("end_turn", ["rejected"])
    replies = [m["result"] for m in read_log(log_path) if "result" in m]
    assert replies == [
        {"outcome": {"outcome": "selected", "optionId": "allow_once"}},
        {"outcome": {"outcome": "selected", "optionId": "reject_once"}},
    ]


async def test_permission_timeout_gives_cancelled(spawn, log_path):
    agent = await spawn("--log", str(log_path))

    async def times_out(request):
        try:
            return await asyncio.wait_for(asyncio.Event().wait(), 0.2)
        except TimeoutError:
            return None  # what the bridge does when nobody answers

    stop, updates = await ask(agent, "[[permission]] may I?", times_out)
    assert stop == "cancelled" and texts(updates) == []
    assert [m["result"] for m in read_log(log_path) if "result" in m] == [{"outcome": {"outcome": "cancelled"}}]


async def test_cancel_answers_pending_permission(spawn, log_path):
    agent = await spawn("--permission", "--log", str(log_path))
    session_id = await agent.new_session()
    asked = asyncio.Event()

    async def never(request):
        asked.set()
        await asyncio.Event().wait()

    prompt = asyncio.create_task(agent.prompt(session_id, "x", lambda u: None, never))
    await asyncio.wait_for(asked.wait(), PATIENCE)
    await agent.cancel(session_id)
    assert await asyncio.wait_for(prompt, PATIENCE) == "cancelled"
    cancelled = {"outcome": {"outcome": "cancelled"}}

    def order(log):  # where the agent read the cancel notification and the cancelled outcome
        notes = [
            i
            for i, m in enumerate(log)
            if m.get("method") == "session/cancel" and m.get("params") == {"sessionId": session_id}
        ]
        outcomes = [i for i, m in enumerate(log) if m.get("result") == cancelled]
        return notes, outcomes

    notes, outcomes = order(await log_until(log_path, lambda log: all(order(log))))
    # ACP prompt-turn cancellation: session/cancel first, then the pending questions answered
    assert notes[0] < outcomes[0]


async def test_cancel_mid_stream(spawn, log_path):
    agent = await spawn("--log", str(log_path))
    session_id = await agent.new_session()
    updates = []

    def on_update(update):
        updates.append(update)
        if len(updates) == 2:
            asyncio.ensure_future(agent.cancel(session_id))

    # 200 parts 0.05 s apart: only the cancel can end it before its last part, however slow
    stop = await agent.prompt(session_id, "[[chunks:200]] [[delay:0.05]] go", on_update)
    assert stop == "cancelled"
    assert 2 <= len(updates) < 200
    assert any(m.get("method") == "session/cancel" for m in read_log(log_path))
    # The session still works afterwards.
    assert (await ask(agent, "again", session_id=session_id))[0] == "end_turn"


async def test_load_session_replay_is_not_delivered(tmp_path, log_path, spawn):
    state = str(tmp_path / "state")
    first = await spawn("--load-session", "--state", state)
    assert first.load_session
    session_id = await first.new_session()
    await ask(first, "remember me", session_id=session_id)
    await first.stop()

    second = await spawn("--load-session", "--state", state, "--log", str(log_path))
    assert session_id not in second.sessions
    wire = []  # what really arrived, to prove the replay happened
    handler = second.peer._on_notification

    async def spy(method, params):
        if params.get("sessionId") == session_id:  # the other session's prompt streams meanwhile
            wire.append(params["update"])
        await handler(method, params)

    second.peer._on_notification = spy
    other = await second.new_session()  # a prompt elsewhere must not get the replay either
    other_updates = []
    # it streams a part, then waits for a file never made: it is still going during the load,
    # and only the cancel below ends it
    other_prompt = asyncio.create_task(
        second.prompt(other, f"[[chunks:2]] [[hold:{tmp_path / 'never'}]] go on", other_updates.append)
    )
    # its first part came: the agent runs that prompt (a cancel sent before the agent began it
    # was lost, and the prompt held for ever: 1 run in 4)
    await until(lambda: other_updates, what="the other prompt's first part")
    await second.load_session(session_id)
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in wire if "content" in u][-2:] == [
        ("user_message_chunk", "remember me"),
        ("agent_message_chunk", "echo: remember me"),
    ]
    await second.cancel(other)
    assert await other_prompt == "cancelled"
    assert {u.kind for u in other_updates} == {"text"}
    assert "remember me" not in "".join(u.text for u in other_updates)
    assert session_id in second.sessions
    load = [m for m in read_log(log_path) if m.get("method") == "session/load"]
    assert load[0]["params"]["sessionId"] == session_id and os.path.isabs(load[0]["params"]["cwd"])
    stop, updates = await ask(second, "and now?", session_id=session_id)
    assert (stop, [(u.kind, u.text) for u in updates]) == ("end_turn", [("text", "echo: and now?")])
    with pytest.raises(RpcError) as err:
        await second.load_session("sess_unknown")
    assert err.value.code == -32002


async def test_no_load_session_capability(spawn):
    agent = await spawn()
    assert not agent.load_session and agent.supports_load_session is False
    with pytest.raises(AcpError, match="cannot load sessions"):
        await agent.load_session("sess_x")


async def test_five_mib_line(spawn):
    agent = await spawn("--big-line", "5")
    stop, updates = await ask(agent, "big")
    assert stop == "end_turn" and len(texts(updates)) == 1
    assert len(texts(updates)[0]) == 5 * 1024 * 1024


async def test_a_line_over_the_limit_is_dropped_with_a_clear_line_and_the_turn_ends(spawn, caplog, monkeypatch):
    from acp import framing

    monkeypatch.setattr(framing, "MAX_LINE_BYTES", 1024 * 1024)  # 1 MiB here instead of 64 MiB
    agent = await spawn()
    stop, updates = await ask(agent, "[[big:2]]")  # one chunk of 2 MiB: a line over the limit
    assert stop == "end_turn" and texts(updates) == []  # dropped, never held; the reply still came
    assert "over the 1,048,576-byte limit of one ACP message, was dropped" in caplog.text
    assert (await ask(agent, "again"))[0] == "end_turn"  # the connection goes on


async def test_stderr_flood_neither_blocks_nor_grows(spawn):
    agent = await spawn("--stderr-flood", "10", "--answer", "still here")
    # an undrained stderr pipe would block the agent for ever: the bound only turns a hang
    # into a failure (how fast a flood is drained is no question here)
    stop, updates = await asyncio.wait_for(ask(agent, "flood"), 4 * PATIENCE)
    assert (stop, texts(updates)) == ("end_turn", ["still here"])
    tail = agent.stderr_tail()
    assert 0 < len(tail) <= 4096 and tail.endswith("E\n")


async def test_garbage_line_is_survived(spawn, caplog):
    agent = await spawn("--garbage")
    stop, updates = await ask(agent, "hi")
    assert (stop, texts(updates)) == ("end_turn", ["echo: hi"])
    assert "this is not JSON" in caplog.text  # logged, not raised
    assert (await ask(agent, "again"))[0] == "end_turn"


async def test_crash_at_start():
    with pytest.raises(AgentStartError) as err:
        await start_agent(scripted_spec("alice", "--crash-at-start"))
    message = str(err.value)
    assert "alice" in message and "exit code 3" in message and "crashing at start" in message
    assert err.value.exit_code == 3 and "\n" not in message


async def test_crash_mid_answer(spawn):
    agent = await spawn("--crash-mid-answer", "--chunks", "3")
    updates = []
    with pytest.raises(AgentCrashed) as err:
        await agent.prompt(await agent.new_session(), "die", updates.append)
    assert err.value.exit_code == 3
    assert "crashing mid-answer" in err.value.stderr_tail and "crashing mid-answer" in str(err.value)
    assert texts(updates) == ["ech"]  # the first of 3 chunks of "echo: die"
    assert agent.returncode == 3


async def test_hang_past_timeout_is_killed(spawn, log_path):
    agent = await spawn("--hang", "--log", str(log_path))
    session_id = await agent.new_session()
    # the silence limit, set once the agent is up: a slow start is not what is tested
    agent.spec.timeout = 1.0
    with pytest.raises(AgentTimeout) as err:
        await asyncio.wait_for(ask(agent, "hang", session_id=session_id), 4 * PATIENCE)
    assert err.value.killed and "silent for 1 s" in str(err.value)
    assert agent.returncode is not None  # the process is gone
    assert any(m.get("method") == "session/cancel" for m in read_log(log_path))


async def test_auth_required(spawn):
    agent = await spawn("--auth")
    assert agent.auth_methods[0]["id"] == "scripted-login"
    with pytest.raises(AuthRequired) as err:
        await agent.new_session()
    assert "Scripted login" in str(err.value) and err.value.methods == agent.auth_methods


async def test_missing_command():
    from acp import AgentSpec

    with pytest.raises(AgentStartError) as err:
        await start_agent(AgentSpec(name="alice", command=["no-such-agent-xyz", "--acp"]))
    assert str(err.value) == "alice: command not found: no-such-agent-xyz"


async def test_env_is_merged_and_cwd_used(spawn, tmp_path):
    os.environ["SK_ACP_PARENT_VAR"] = "from-parent"
    try:
        agent = await spawn(env={"SK_ACP_VAR": "from-spec"}, cwd=str(tmp_path))
    finally:
        del os.environ["SK_ACP_PARENT_VAR"]
    session_id = await agent.new_session()
    assert texts((await ask(agent, "[[env:SK_ACP_VAR]]", session_id=session_id))[1]) == ["from-spec"]
    assert texts((await ask(agent, "[[env:SK_ACP_PARENT_VAR]]", session_id=session_id))[1]) == ["from-parent"]
    assert texts((await ask(agent, "[[cwd]]", session_id=session_id))[1]) == [str(tmp_path)]


async def test_waiting_for_a_person_is_not_silence(spawn):
    agent = await spawn("--permission")
    session_id = await agent.new_session()
    agent.spec.timeout = 1.0  # once the agent is up: only the prompt is under the limit

    async def slow_person(request):
        await asyncio.sleep(2.0)  # twice the agent's silence limit (the subject of the test)
        return "allow_once"

    assert await ask(agent, "may I?", slow_person, session_id=session_id) == (
        "end_turn",
        [await _text_update("allowed")],
    )


async def _text_update(text):
    from acp import Update

    return Update(
        kind="text", text=text, raw={"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    )


async def test_silent_agent_that_obeys_cancel_keeps_running(spawn, log_path):
    from acp.client import CANCEL_GRACE

    agent = await spawn("--chunks", "3", "--delay", "60", "--log", str(log_path))
    session_id = await agent.new_session()
    # silent for 60 s between parts, the limit once it is up: CANCEL_GRACE, so that the grace a
    # cancelled prompt gets (min(CANCEL_GRACE, limit)) is the real one, not a shortened one
    agent.spec.timeout = CANCEL_GRACE
    with pytest.raises(AgentTimeout) as err:
        await ask(agent, "slow thinker", session_id=session_id)
    assert not err.value.killed and "the answer was cancelled" in str(err.value)
    assert agent.returncode is None
    assert any(m.get("method") == "session/cancel" for m in read_log(log_path))
    assert await ask(agent, "[[answer:quick]][[chunks:1]]") == ("end_turn", [await _text_update("quick")])


async def test_stopping_during_an_answer(spawn):
    from acp import AgentStopped

    agent = await spawn()
    session_id = await agent.new_session()
    first = asyncio.Event()
    prompt = asyncio.create_task(agent.prompt(session_id, "[[slow]]", lambda u: first.set()))
    await asyncio.wait_for(first.wait(), PATIENCE)
    await agent.stop()
    with pytest.raises(AgentStopped) as err:
        await prompt
    assert str(err.value) == "alice was stopped while answering" and isinstance(err.value, AgentCrashed)


async def test_stop_leaves_no_process_behind(tmp_path):
    import sys

    from acp_helpers import SCRIPTED

    from acp import AgentSpec

    pidfile = tmp_path / "child.pid"
    # The agent starts a helper of its own, as real agents do (node, shells).
    script = f"sleep 300 & echo $! > {pidfile}; exec {sys.executable} {SCRIPTED}"
    agent = await start_agent(AgentSpec(name="alice", command=["sh", "-c", script]))
    child = int(pidfile.read_text())
    assert _alive(child)
    await agent.stop()
    assert agent.returncode is not None
    await until(lambda: not _alive(child), what=f"the agent's helper (pid {child}) is gone")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False


async def test_time_idle_before_a_prompt_is_not_silence(spawn):
    agent = await spawn()
    session_id = await agent.new_session()
    agent.spec.timeout = 1.0
    await asyncio.sleep(2.0)  # idle between turns, longer than the limit (the subject of the test)
    assert (await ask(agent, "still fine", session_id=session_id))[0] == "end_turn"


async def test_scripted_answer_sizes(spawn):
    agent = await spawn("--answer-size", "1000", "--chunks", "4")
    _, updates = await ask(agent, "default size")
    assert len(texts(updates)) == 4 and len("".join(texts(updates))) == 1000
    _, updates = await ask(agent, "[[size:40000]]")
    answer = "".join(texts(updates))
    assert len(answer) == 40000 and answer.count("\n") > 100


async def test_permission_asked_after_cancel_is_cancelled_unasked(spawn):
    """A question the agent sends once session/cancel is out is answered `cancelled` at once:
    the person is not asked about a turn that is already stopped."""
    agent = await spawn("--chunks", "20", "--delay", "0.2")
    session_id = await agent.new_session()
    asked = []

    async def ask_person(request):
        asked.append(request)
        return "allow_once"

    prompt = asyncio.create_task(agent.prompt(session_id, "x", lambda u: None, ask_person))
    await until(
        lambda: agent._prompts.get(session_id) and agent._prompts[session_id].sent, what="the prompt was written"
    )
    await agent.cancel(session_id)
    reply = await agent._ask_permission(
        {
            "sessionId": session_id,
            "toolCall": {"toolCallId": "t"},
            "options": [{"optionId": "allow_once", "kind": "allow_once"}],
        }
    )
    assert reply == {"outcome": {"outcome": "cancelled"}} and asked == []
    assert await asyncio.wait_for(prompt, PATIENCE) == "cancelled"
