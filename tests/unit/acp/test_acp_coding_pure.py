"""Coding-agent updates, tool calls, session settings and elicitation: pure, no processes."""

from __future__ import annotations

import pytest

from acp.elicitation import BadElicitation, ElicitationAnswer, parse_answer, parse_request, url_host
from acp.session_state import ChoiceError, Choices, SessionState, plan_choices, resolve
from acp.toolcalls import TERMINAL_KEEP, ToolCall
from acp.updates import normalise_update

MODES = {
    "currentModeId": "ask",
    "availableModes": [
        {"id": "ask", "name": "Ask"},
        {"id": "plan", "name": "Plan", "description": "No changes"},
        {"id": "code", "name": "Code"},
    ],
}
CONFIG = [
    {
        "id": "mode",
        "name": "Mode",
        "category": "mode",
        "type": "select",
        "currentValue": "ask",
        "options": [
            {"value": "ask", "name": "Ask"},
            {"value": "plan", "name": "Plan"},
            {"value": "code", "name": "Code"},
        ],
    },
    {
        "id": "model",
        "name": "Model",
        "category": "model",
        "type": "select",
        "currentValue": "small",
        "options": [
            {"group": "local", "name": "Local", "options": [{"value": "small", "name": "Small"}]},
            {"group": "remote", "name": "Remote", "options": [{"value": "large", "name": "Large"}]},
        ],
    },
    {
        "id": "thought_level",
        "name": "Thinking",
        "category": "thought_level",
        "type": "select",
        "currentValue": "low",
        "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}],
    },
]
MODELS = {
    "currentModelId": "small",
    "availableModels": [{"modelId": "small", "name": "Small"}, {"modelId": "large", "name": "Large"}],
}


def update(**raw):
    return normalise_update(raw)


# --- updates and tool calls ---------------------------------------------------------------


def test_plan_entries_are_normalised_and_each_plan_is_whole():
    u = update(
        sessionUpdate="plan",
        entries=[
            {"content": "Read", "priority": "high", "status": "completed"},
            {"content": "Write", "priority": "urgent", "status": "started"},  # unknown → defaults
            {"priority": "low"},
            "junk",
        ],
    )
    assert [(e.content, e.priority, e.status) for e in u.plan] == [
        ("Read", "high", "completed"),
        ("Write", "medium", "pending"),
    ]
    assert update(sessionUpdate="plan").plan == []


def test_tool_call_fields_and_content_kinds():
    u = update(
        sessionUpdate="tool_call",
        toolCallId="c1",
        title="Edit a.py",
        kind="edit",
        locations=[{"path": "/p/a.py", "line": 3}, {"path": ""}, {"line": 2}],
        content=[
            {"type": "diff", "path": "/p/a.py", "oldText": "a\n", "newText": "b\n"},
            {"type": "diff", "path": "/p/new.py", "oldText": None, "newText": "x\n"},
            {"type": "terminal", "terminalId": "t1"},
            {"type": "content", "content": {"type": "text", "text": "hi"}},
            {"type": "diff", "newText": "no path"},
        ],
    )
    assert (u.tool_call_id, u.title, u.tool_kind, u.status) == ("c1", "Edit a.py", "edit", "pending")
    assert [(loc.path, loc.line) for loc in u.locations] == [("/p/a.py", 3)]
    assert [c.type for c in u.content] == ["diff", "diff", "terminal", "content"]
    assert u.content[0].old_text == "a\n" and u.content[1].old_text is None
    assert u.content[2].terminal_id == "t1" and u.content[3].text == "hi"
    # an update that leaves a field out leaves it unchanged (None), one that sends [] clears it
    later = update(sessionUpdate="tool_call_update", toolCallId="c1", status="weird")
    assert later.content is None and later.locations is None and later.status is None and later.tool_kind is None
    assert update(sessionUpdate="tool_call_update", toolCallId="c1", content=[]).content == []


def test_terminal_meta_of_the_agents():
    u = update(
        sessionUpdate="tool_call_update",
        toolCallId="c",
        _meta={"terminal_info": {"terminal_id": "t"}, "terminal_output": {"terminal_id": "t", "data": "a\n"}},
    )
    assert (u.terminal.terminal_id, u.terminal.data, u.terminal.exited) == ("t", "a\n", False)
    end = update(
        sessionUpdate="tool_call_update",
        toolCallId="c",
        _meta={"terminal_exit": {"terminal_id": "t", "exit_code": 2, "signal": None}},
    )
    assert (end.terminal.exited, end.terminal.exit_code) == (True, 2)
    assert update(sessionUpdate="tool_call_update", toolCallId="c", _meta={"other": 1}).terminal is None


def test_tool_call_fold_replaces_content_appends_terminal_output():
    call = ToolCall("c1")
    call.apply(
        update(
            sessionUpdate="tool_call",
            toolCallId="c1",
            title="Run",
            kind="execute",
            content=[{"type": "terminal", "terminalId": "t"}],
        )
    )
    for chunk in ("one\n", "two\n"):
        call.apply(
            update(
                sessionUpdate="tool_call_update",
                toolCallId="c1",
                _meta={"terminal_output": {"terminal_id": "t", "data": chunk}},
            )
        )
    call.apply(
        update(
            sessionUpdate="tool_call_update",
            toolCallId="c1",
            status="completed",
            _meta={"terminal_exit": {"terminal_id": "t", "exit_code": 0}},
        )
    )
    assert (call.title, call.kind, call.status, call.finished) == ("Run", "execute", "completed", True)
    assert call.terminals["t"].output == "one\ntwo\n" and call.terminals["t"].exit_code == 0
    assert [c.type for c in call.content] == ["terminal"]  # an update without content keeps it
    call.apply(
        update(
            sessionUpdate="tool_call_update", toolCallId="c1", content=[{"type": "diff", "path": "/a", "newText": "x"}]
        )
    )
    assert [c.type for c in call.content] == ["diff"] and len(call.diffs) == 1  # replaced, whole
    call.apply(
        update(
            sessionUpdate="tool_call_update",
            toolCallId="c1",
            _meta={"terminal_output": {"terminal_id": "t", "data": "y" * (TERMINAL_KEEP + 10)}},
        )
    )
    assert len(call.terminals["t"].output) == TERMINAL_KEEP and call.terminals["t"].dropped > 0


def test_state_update_kinds():
    assert (
        update(sessionUpdate="config_option_update", configOptions=CONFIG).config_options[1].choices[1].group
        == "Remote"
    )
    usage = update(sessionUpdate="usage_update", used=5, size=10, cost={"amount": 0.5, "currency": "EUR"}).usage
    assert (usage.used, usage.size, usage.cost, usage.currency) == (5, 10, 0.5, "EUR")
    assert update(sessionUpdate="usage_update", used=-1, size=10).usage is None
    assert update(sessionUpdate="usage_update", used=True, size=10).usage is None


# --- session state ------------------------------------------------------------------------


def test_config_options_are_preferred_over_modes():
    state = SessionState()
    state.apply_result({"sessionId": "s", "modes": MODES, "configOptions": CONFIG})
    mode = state.selector("mode")
    assert (mode.via, mode.key, mode.current) == ("config", "mode", "ask")
    model = state.selector("model")
    assert (model.via, [c.id for c in model.choices]) == ("config", ["small", "large"])
    only_modes = SessionState()
    only_modes.apply_result({"modes": MODES})
    assert only_modes.selector("mode").via == "set_mode" and only_modes.selector("model") is None
    models = SessionState()
    models.apply_result({"models": MODELS})  # the agents' fallback, outside the spec
    assert models.selector("model").via == "set_model" and models.model == "small"
    assert state.selector("config", "Thinking").key == "thought_level"
    assert state.selector("config", "nope") is None


def test_updates_keep_the_state_and_a_result_replaces_only_its_fields():
    state = SessionState()
    # updates may come before session/new returns
    state.apply_update(update(sessionUpdate="usage_update", used=1, size=100))
    state.apply_update(update(sessionUpdate="session_info_update", title="Early"))
    state.apply_result({"sessionId": "s", "modes": MODES, "configOptions": CONFIG})
    assert state.usage.used == 1 and state.title == "Early" and state.mode == "ask"
    state.apply_update(update(sessionUpdate="current_mode_update", currentModeId="plan"))
    assert state.modes.current == "plan" and state.mode == "plan"  # the config option follows
    state.apply_update(update(sessionUpdate="session_info_update", updatedAt="2026-01-01T00:00:00Z"))
    assert state.title == "Early"  # absent: unchanged
    state.apply_update(update(sessionUpdate="session_info_update", title=None))
    assert state.title is None  # null: cleared
    assert not state.apply_update(update(sessionUpdate="agent_message_chunk"))


def test_snapshot_round_trip():
    state = SessionState()
    state.apply_result({"modes": MODES, "configOptions": CONFIG, "models": MODELS})
    state.title = "T"
    again = SessionState.from_json(state.to_json())
    assert again.modes == state.modes and again.config == state.config and again.models == state.models
    assert again.title == "T" and SessionState.from_json("garbage").config is None


def test_resolve_by_id_name_case_and_prefix():
    choices = SessionState.from_json(
        {
            "modes": {
                "current": "ask",
                "choices": [
                    {"id": "ask", "name": "Ask"},
                    {"id": "plan", "name": "Plan"},
                    {"id": "pair", "name": "Pair coding"},
                ],
            }
        }
    ).modes.choices
    assert resolve(choices, "plan").id == "plan"
    assert resolve(choices, "PLAN").id == "plan"
    assert resolve(choices, "pair coding").id == "pair"
    assert resolve(choices, "as").id == "ask"
    with pytest.raises(ChoiceError, match="ambiguous"):
        resolve(choices, "p")
    with pytest.raises(ChoiceError, match=r"^no mode 'fly'; choose one of: ask \(Ask\), plan \(Plan\)"):
        resolve(choices, "fly", "mode")


def test_plan_choices_only_what_differs_model_first_mode_last():
    state = SessionState()
    state.apply_result({"modes": MODES, "configOptions": CONFIG})
    choices = Choices(mode="plan", model="large", config={"thought_level": "low", "gone": "x"})
    steps, skipped = plan_choices(state, choices)
    assert [(s.selector.key, s.value) for s in steps] == [("model", "large"), ("mode", "plan")]
    assert [(s.key, s.reason) for s in skipped] == [("gone", "the agent no longer offers option 'gone'")]
    stale = plan_choices(state, Choices(mode="yolo"))[1]
    assert "no longer one of" in stale[0].reason
    assert plan_choices(state, Choices(mode="ask")) == ([], [])


def test_choices_record_by_category():
    state = SessionState()
    state.apply_result({"configOptions": CONFIG})
    choices = Choices().with_choice(state.selector("config", "mode"), "code")
    choices = choices.with_choice(state.selector("config", "thought_level"), "high")
    assert choices == Choices(mode="code", config={"thought_level": "high"})
    assert Choices.from_json(choices.to_json()) == choices and not Choices()


# --- elicitation --------------------------------------------------------------------------

FORM = {
    "sessionId": "s",
    "mode": "form",
    "message": "Details",
    "requestedSchema": {
        "type": "object",
        "required": ["name", "count"],
        "properties": {
            "name": {"type": "string", "title": "Name", "minLength": 2},
            "count": {"type": "integer", "minimum": 1, "maximum": 10},
            "colour": {"type": "string", "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
            "tags": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "maxItems": 2},
            "ok": {"type": "boolean", "default": True},
        },
    },
}


def test_parse_request_form_and_url():
    request = parse_request(FORM)
    assert [f.name for f in request.fields] == ["name", "count", "colour", "tags", "ok"]
    assert request.fields[0].required and not request.fields[2].required
    assert [o.title for o in request.fields[2].options] == ["Red", "Green"]
    url = parse_request(
        {
            "sessionId": "s",
            "mode": "url",
            "message": "Log in",
            "elicitationId": "e1",
            "url": "https://login.example.com/a?b=c",
        }
    )
    assert url.host == "login.example.com" and url.elicitation_id == "e1"
    assert url_host("javascript:alert(1)") is None and url_host("file:///etc/passwd") is None
    for bad in (
        {"mode": "form"},
        {"mode": "url", "url": "https://x"},
        {"mode": "voice"},
        {"mode": "form", "requestedSchema": {"properties": {"a": {"type": "object"}}}},
    ):
        with pytest.raises(BadElicitation):
            parse_request(bad)


def test_parse_answer_numbered_named_and_in_order():
    fields = parse_request(FORM).fields
    content, problems = parse_answer(fields, "1. Sidekicks\n2. 3\n3. b\n4. x, z\n5. no")
    assert problems == [] and content == {
        "name": "Sidekicks",
        "count": 3,
        "colour": "g",
        "tags": ["x", "z"],
        "ok": False,
    }
    content, problems = parse_answer(fields, "count: 4\nname = Bob")
    assert problems == [] and content == {"name": "Bob", "count": 4, "ok": True}  # default kept
    content, problems = parse_answer(fields, "Ann\n2\nRed")
    assert problems == [] and content == {"name": "Ann", "count": 2, "colour": "r", "ok": True}


def test_parse_answer_problems_are_readable():
    fields = parse_request(FORM).fields
    _, problems = parse_answer(fields, "1. A\n2. 11\n4. x y z")
    assert problems == ["Name: at least 2 characters", "count: at most 10", "tags: choose at most 2"]
    _, problems = parse_answer(fields, "2. 5")
    assert problems == ["Name: an answer is needed"]
    _, problems = parse_answer(fields, "1. Al\n2. many")
    assert problems == ["count: 'many' is not a whole number"]


def test_one_field_takes_the_whole_reply_and_choice_numbers():
    one = parse_request(
        {
            "sessionId": "s",
            "mode": "form",
            "message": "Which?",
            "requestedSchema": {
                "properties": {
                    "pick": {
                        "type": "string",
                        "oneOf": [{"const": "a1", "title": "First"}, {"const": "b2", "title": "Second"}],
                    }
                }
            },
        }
    ).fields
    assert parse_answer(one, "2") == ({"pick": "b2"}, [])
    assert parse_answer(one, "1. second") == ({"pick": "b2"}, [])
    assert parse_answer(one, "b)") == ({"pick": "b2"}, [])
    assert parse_answer(one, "first") == ({"pick": "a1"}, [])


def test_answer_results():
    assert ElicitationAnswer("accept", {"a": 1}).to_result() == {"action": "accept", "content": {"a": 1}}
    assert ElicitationAnswer("decline").to_result() == {"action": "decline"}
    assert ElicitationAnswer("whatever").to_result() == {"action": "cancel"}


def test_a_boolean_config_option_is_an_on_off_choice_set_as_a_bool():
    state = SessionState()
    state.apply_result(
        {"configOptions": [{"id": "yolo", "name": "Auto-approve", "type": "boolean", "currentValue": False}]}
    )
    selector = state.selector("config", "auto-approve")
    assert selector is not None and selector.boolean and selector.current == "false"
    assert [c.id for c in selector.choices] == ["true", "false"]
    assert resolve(selector.choices, "on").id == "true" and resolve(selector.choices, "off").id == "false"
