"""acp.client against the scripted coding agent (tests/agents/coding_agent.py), a real process
per test: session settings, plans, tool calls, permissions about diffs, elicitation,
$/cancel_request both ways, the bound on open questions."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from acp_helpers import log_until, read_log

import acp.client
from acp import AcpError, AgentSpec, Choices, ElicitationAnswer, ToolCall, start_agent
from acp.client import CODING_CLIENT_CAPABILITIES

CODING = str(Path(__file__).resolve().parents[2] / "agents" / "coding_agent.py")


def coding_spec(*args: str, name: str = "coder") -> AgentSpec:
    return AgentSpec(name=name, command=[sys.executable, CODING, *args])


@pytest_asyncio.fixture
async def coder(log_path):
    """coder(*args, on_state=...) -> a started coding agent logging to log_path."""
    started = []

    async def _start(*args: str, on_state=None, log=None):
        agent = await start_agent(
            coding_spec("--log", str(log or log_path), *args),
            client_capabilities=CODING_CLIENT_CAPABILITIES,
            on_state=on_state,
        )
        started.append(agent)
        return agent

    yield _start
    for agent in started:
        await agent.stop()


def calls(log: list[dict], method: str) -> list[dict]:
    return [m["params"] for m in log if m.get("method") == method]


async def prompt(agent, session_id, text, **callbacks):
    updates = []
    stop = await agent.prompt(session_id, text, updates.append, **callbacks)
    return stop, updates


def said(updates) -> str:
    return "".join(u.text for u in updates if u.kind == "text")


# --- session settings ---------------------------------------------------------------------


async def test_initialize_announces_elicitation_and_terminal_output(coder, log_path):
    await coder()
    init = read_log(log_path)[0]["params"]["clientCapabilities"]
    assert init["elicitation"] == {"form": {}, "url": {}} and init["_meta"] == {"terminal_output": True}
    assert init["auth"] == {"terminal": True}  # terminal logins are told to the owner (docs/sessions.md "Logins")


async def test_session_new_settings_are_kept(coder):
    agent = await coder("--offer", "modes,config,models")
    session_id = await agent.new_session()
    state = agent.state(session_id)
    assert state.mode == "ask" and state.model == "small"
    assert [c.id for c in state.modes.choices] == ["ask", "plan", "code"]
    assert [o.id for o in state.config] == ["mode", "model", "thought_level"]
    assert [c.id for c in state.models.choices] == ["small", "large"]


async def test_updates_sent_before_session_new_returns_are_kept(coder):
    heard = []
    agent = await coder("--early", on_state=lambda *a: heard.append((a[0], a[2].kind)))
    session_id = await agent.new_session()
    state = agent.state(session_id)
    assert state.usage.used == 10 and state.usage.size == 1000 and state.title == "Fresh start"
    assert state.mode == "ask"  # and the reply's own fields too
    assert heard == [("coder", "usage"), ("coder", "session_info")]


async def test_set_mode_goes_through_the_config_option_when_there_is_one(coder, log_path):
    heard = []
    agent = await coder(on_state=lambda name, sid, update, state: heard.append((update.kind, state.mode)))
    session_id = await agent.new_session()
    selector, value = await agent.set_mode(session_id, "Plan")  # by name, any case
    assert (selector.via, value) == ("config", "plan") and agent.state(session_id).mode == "plan"
    log = await log_until(log_path, lambda log: calls(log, "session/set_config_option"))
    assert calls(log, "session/set_config_option") == [{"sessionId": session_id, "configId": "mode", "value": "plan"}]
    assert calls(log, "session/set_mode") == []
    # the agent's own current_mode_update, heard outside any prompt
    await asyncio.wait_for(_until(lambda: ("mode", "plan") in heard), 10)


async def test_set_mode_and_model_fall_back_without_config_options(coder, log_path):
    agent = await coder("--offer", "modes,models")
    session_id = await agent.new_session()
    assert (await agent.set_mode(session_id, "code"))[0].via == "set_mode"
    assert (await agent.set_model(session_id, "large"))[0].via == "set_model"
    state = agent.state(session_id)
    assert state.mode == "code" and state.model == "large"
    log = await log_until(log_path, lambda log: calls(log, "session/set_model"))
    assert calls(log, "session/set_mode") == [{"sessionId": session_id, "modeId": "code"}]
    assert calls(log, "session/set_model") == [{"sessionId": session_id, "modelId": "large"}]


async def test_set_model_through_its_config_option_and_other_options(coder, log_path):
    agent = await coder()
    session_id = await agent.new_session()
    await agent.set_model(session_id, "large")
    await agent.set_config_option(session_id, "thinking", "high")  # the option by name
    state = agent.state(session_id)
    assert state.model == "large" and state.option("thought_level").current == "high"
    log = await log_until(log_path, lambda log: len(calls(log, "session/set_config_option")) == 2)
    assert [(c["configId"], c["value"]) for c in calls(log, "session/set_config_option")] == [
        ("model", "large"),
        ("thought_level", "high"),
    ]


async def test_bad_choices_are_one_line_and_send_nothing(coder, log_path):
    agent = await coder("--offer", "config")
    session_id = await agent.new_session()
    with pytest.raises(
        AcpError, match=r"^coder: no mode 'fly'; choose one of: ask \(Ask\), plan \(Plan\), code \(Code\)$"
    ):
        await agent.set_mode(session_id, "fly")
    with pytest.raises(AcpError, match=r"^coder has no option 'colour'; its options: mode, model, thought_level$"):
        await agent.set_config_option(session_id, "colour", "red")
    bare = await coder("--offer", "", log=log_path.with_name("bare.jsonl"))
    bare_session = await bare.new_session()
    with pytest.raises(AcpError, match="^coder offers no modes$"):
        await bare.set_mode(bare_session, "plan")
    with pytest.raises(AcpError, match="^coder offers no model choice$"):
        await bare.set_model(bare_session, "large")
    assert calls(read_log(log_path), "session/set_config_option") == []


async def test_choices_are_applied_again_after_a_restart(coder, log_path, tmp_path):
    state_dir = str(tmp_path / "sessions")
    first = await coder("--load-session", "--state", state_dir)
    session_id = await first.new_session()
    await first.set_model(session_id, "large")
    await first.set_mode(session_id, "plan")
    choices = Choices(mode="plan", model="large", config={"thought_level": "low", "colour": "red"})
    await first.stop()
    # a new process: the loaded session starts from the defaults again
    second_log = tmp_path / "second.jsonl"
    second = await coder("--load-session", "--state", state_dir, log=second_log)
    await second.load_session(session_id)
    assert second.state(session_id).mode == "ask"
    applied = await second.apply_choices(session_id, choices)
    assert applied.done == [("model", "model", "large"), ("mode", "mode", "plan")]
    assert [(f.key, f.reason) for f in applied.failed] == [("colour", "the agent no longer offers option 'colour'")]
    assert second.state(session_id).mode == "plan" and second.state(session_id).model == "large"
    log = await log_until(second_log, lambda log: len(calls(log, "session/set_config_option")) == 2)
    assert [(c["configId"], c["value"]) for c in calls(log, "session/set_config_option")] == [
        ("model", "large"),
        ("mode", "plan"),
    ]
    # nothing differs any more: nothing is sent
    assert (await second.apply_choices(session_id, choices)).done == []


async def test_the_agent_changes_its_own_mode_during_a_turn(coder):
    heard = []
    agent = await coder(on_state=lambda name, sid, update, state: heard.append(update.kind))
    session_id = await agent.new_session()
    stop, updates = await prompt(agent, session_id, "[[mode:code]] go")
    assert stop == "end_turn" and agent.state(session_id).mode == "code"
    assert "mode" in [u.kind for u in updates] and "mode" in heard and "config" in heard


# --- what a turn shows ----------------------------------------------------------------------


async def test_plans_replace_and_tool_calls_fold(coder):
    agent = await coder()
    session_id = await agent.new_session()
    stop, updates = await prompt(agent, session_id, "[[plan:3]] [[edit]] [[run]] refactor")
    plans = [u.plan for u in updates if u.kind == "plan"]
    assert len(plans) == 3
    assert [e.content for e in plans[2]] == ["Read the code", "Write the change", "Run the tests", "Tidy up"]
    assert [e.status for e in plans[0]] == ["in_progress", "pending"]
    assert [e.status for e in plans[2]] == ["completed", "completed", "in_progress", "pending"]
    tool_calls: dict[str, ToolCall] = {}
    for u in updates:
        if u.kind in ("tool_call", "tool_call_update"):
            tool_calls.setdefault(u.tool_call_id, ToolCall(u.tool_call_id)).apply(u)
    edit, run = tool_calls["call_edit"], tool_calls["call_run"]
    assert (edit.kind, edit.status, edit.title) == ("edit", "completed", "Edit notes.py")
    assert edit.diffs[0].path == "/work/project/notes.py" and "print(f'hello {name}')" in edit.diffs[0].new_text
    assert [(loc.path, loc.line) for loc in edit.locations] == [("/work/project/notes.py", 1)]
    terminal = run.terminals["term_1"]
    assert terminal.output == "test_1 ... ok\ntest_2 ... ok\ntest_3 ... ok\n"
    assert terminal.exited and terminal.exit_code == 0 and run.status == "completed"
    assert said(updates) == "done: refactor"


async def test_usage_and_title_during_a_turn(coder):
    agent = await coder()
    session_id = await agent.new_session()
    await prompt(agent, session_id, "[[usage]] [[title:Refactor the greeter]] hi")
    state = agent.state(session_id)
    assert (state.usage.used, state.usage.size, state.usage.cost, state.usage.currency) == (52000, 200000, 0.42, "USD")
    assert state.title == "Refactor the greeter"


@pytest.mark.parametrize("reason", ["max_tokens", "max_turn_requests", "refusal"])
async def test_stop_reasons(coder, reason):
    agent = await coder()
    session_id = await agent.new_session()
    assert (await prompt(agent, session_id, f"[[stop:{reason}]] x"))[0] == reason


async def test_a_permission_about_an_edit_carries_its_diff(coder):
    agent = await coder()
    session_id = await agent.new_session()
    asked = []

    async def on_permission(request):
        asked.append(request)
        return "always"

    _, updates = await prompt(agent, session_id, "[[permit-edit]] fix", on_permission=on_permission)
    call = asked[0].tool_call
    assert call["kind"] == "edit" and call["content"][0]["type"] == "diff"
    assert [o["kind"] for o in asked[0].options] == ["allow_once", "allow_always", "reject_once", "reject_always"]
    assert said(updates).startswith("permission: always.")


# --- elicitation ---------------------------------------------------------------------------------


async def test_a_form_elicitation_is_answered(coder, log_path):
    agent = await coder()
    session_id = await agent.new_session()
    asked = []

    async def on_elicitation(request):
        asked.append(request)
        return ElicitationAnswer("accept", {"name": "Sidekicks", "count": 2, "confirm": True})

    _, updates = await prompt(agent, session_id, "[[ask]] q", on_elicitation=on_elicitation)
    request = asked[0]
    assert (request.mode, request.message, request.session_id) == ("form", "A few details, please", session_id)
    assert [(f.name, f.type, f.required) for f in request.fields] == [
        ("name", "string", True),
        ("count", "integer", True),
        ("colour", "string", False),
        ("confirm", "boolean", False),
    ]
    reply = {"action": "accept", "content": {"confirm": True, "count": 2, "name": "Sidekicks"}}
    assert f"elicited: {json.dumps(reply, sort_keys=True)}." in said(updates)


async def test_a_url_elicitation_asks_consent_and_hears_completion(coder):
    agent = await coder()
    session_id = await agent.new_session()
    asked = []

    async def on_elicitation(request):
        asked.append(request)
        return ElicitationAnswer("accept")

    _, updates = await prompt(agent, session_id, "[[ask-url]] log in", on_elicitation=on_elicitation)
    assert (asked[0].mode, asked[0].host, asked[0].elicitation_id) == ("url", "login.example.com", "login-1")
    assert [u.text for u in updates if u.kind == "elicitation_complete"] == ["login-1"]
    assert "url consent: accept." in said(updates)
    assert asked[0].completed.is_set()  # what the one who asked waits for (coding/questions.py)


async def test_a_url_elicitation_completed_before_any_answer_sets_its_event(coder, tmp_path):
    agent = await coder()
    session_id = await agent.new_session()
    finished = tmp_path / "finished"

    async def on_elicitation(request):
        assert not request.completed.is_set()
        finished.touch()  # shown: the agent now says the owner finished elsewhere
        await request.completed.wait()
        return ElicitationAnswer("accept")

    _, updates = await prompt(agent, session_id, f"[[ask-url-done:{finished}]] log in", on_elicitation=on_elicitation)
    assert "url elsewhere: accept." in said(updates)


async def test_an_elicitation_nobody_can_answer_is_cancelled(coder):
    agent = await coder()
    session_id = await agent.new_session()
    _, updates = await prompt(agent, session_id, "[[ask]] q")
    assert 'elicited: {"action": "cancel"}.' in said(updates)


async def test_cancel_declines_a_waiting_elicitation_after_session_cancel(coder, log_path):
    agent = await coder()
    session_id = await agent.new_session()
    asking = asyncio.Event()

    async def on_elicitation(request):
        asking.set()
        await asyncio.Event().wait()  # the person never answers

    turn = asyncio.create_task(prompt(agent, session_id, "[[ask]] q", on_elicitation=on_elicitation))
    await asyncio.wait_for(asking.wait(), 10)
    await agent.cancel(session_id)
    assert (await asyncio.wait_for(turn, 10))[0] == "cancelled"
    log = await log_until(log_path, lambda log: any(m.get("result") == {"action": "decline"} for m in log))
    order = [
        i for i, m in enumerate(log) if m.get("method") == "session/cancel" or m.get("result") == {"action": "decline"}
    ]
    assert log[order[0]].get("method") == "session/cancel"  # the turn is known cancelled first


async def test_an_elicitation_the_agent_withdraws_ends_our_wait(coder):
    agent = await coder()
    session_id = await agent.new_session()
    ended = []

    async def on_elicitation(request):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append(request.message)
            raise

    _, updates = await prompt(agent, session_id, "[[ask-withdraw]] q", on_elicitation=on_elicitation)
    assert ended == ["Never mind this"]
    assert "withdrawn: error -32800." in said(updates)
    assert agent._permissions == {} and agent._asking == 0


async def test_a_request_we_abandon_is_cancelled_at_the_agent(coder, log_path):
    agent = await coder("--slow-set")
    session_id = await agent.new_session()
    setting = asyncio.create_task(agent.set_mode(session_id, "plan"))
    log = await log_until(log_path, lambda log: calls(log, "session/set_config_option"))
    request_id = next(m["id"] for m in log if m.get("method") == "session/set_config_option")
    setting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await setting
    await log_until(log_path, lambda log: {"requestId": request_id} in calls(log, "$/cancel_request"))
    # the agent is still fine
    assert (await prompt(agent, session_id, "after"))[1] and agent.returncode is None


async def test_open_questions_are_bounded(coder, monkeypatch):
    monkeypatch.setattr(acp.client, "MAX_QUESTIONS", 3)
    agent = await coder()
    session_id = await agent.new_session()
    gate, waiting = asyncio.Event(), []

    async def on_permission(request):
        waiting.append(request)
        await gate.wait()
        return "yes"

    turn = asyncio.create_task(prompt(agent, session_id, "[[permit-many:5]] go", on_permission=on_permission))
    await asyncio.wait_for(_until(lambda: len(waiting) == 3 and agent.refused_questions == 2), 10)
    gate.set()
    _, updates = await asyncio.wait_for(turn, 10)
    assert "permits: 3 chosen, 2 refused." in said(updates)
    notices = [u.text for u in updates if u.kind == "notice"]
    assert notices == ["coder asked more than 3 questions at once; this permission request was refused"] * 2
    assert agent._permissions == {}  # no entry left behind for the session


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.02)


async def test_states_of_unknown_session_ids_are_bounded(coder):
    agent = await coder()
    session_id = await agent.new_session()
    for n in range(50):  # an agent sending updates for made-up sessions
        await agent._on_notification(
            "session/update",
            {"sessionId": f"made_up_{n}", "update": {"sessionUpdate": "session_info_update", "title": str(n)}},
        )
    unknown = [sid for sid in agent._states if sid != session_id]
    assert len(unknown) == acp.client.MAX_EARLY_STATES and unknown[-1] == "made_up_49"
    assert session_id in agent._states and agent.state(session_id).mode == "ask"
