"""Normalisation of session/update objects (pure)."""

from acp.updates import normalise_commands, normalise_update


def test_text_and_placeholders():
    def text(content):
        return normalise_update({"sessionUpdate": "agent_message_chunk", "content": content}).text

    assert text({"type": "text", "text": "hi"}) == "hi"
    assert text({"type": "image", "data": "...", "mimeType": "image/png"}) == "[image]"
    assert text({"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"}) == "[a.txt]"
    assert text({"type": "resource", "resource": {"uri": "file:///b"}}) == "[resource: file:///b]"
    assert text(None) == ""


def test_kinds():
    cases = {
        "agent_thought_chunk": "thought",
        "user_message_chunk": "user_text",
        "plan": "plan",
        "available_commands_update": "commands",
        "current_mode_update": "mode",
        "session_info_update": "session_info",
        "usage_update": "usage",
        "something_new": "unknown",
    }
    for wire, kind in cases.items():
        assert normalise_update({"sessionUpdate": wire}).kind == kind
    info = normalise_update({"sessionUpdate": "session_info_update", "title": "Refactor"})
    assert info.title == "Refactor" and info.raw["title"] == "Refactor"
    assert normalise_update({"sessionUpdate": "current_mode_update", "currentModeId": "code"}).text == "code"


def test_commands_keep_only_well_formed_entries():
    assert normalise_commands(
        [{"name": "a", "description": "A"}, {"description": "no name"}, "x", {"name": "b", "input": {"hint": "h"}}]
    ) == [{"name": "a", "description": "A", "input": None}, {"name": "b", "description": "", "input": {"hint": "h"}}]
    assert normalise_commands(None) == []
