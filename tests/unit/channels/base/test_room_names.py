"""How a room is named in what the owner reads (bridge/channels/base/room_names.py). Pure."""

from __future__ import annotations

from types import SimpleNamespace

from bridge.channels.base.room_names import place, place_of
from bridge.channels.rules.command_parse import describe_state


def test_a_direct_channel_is_the_direct_chat_never_a_channel_named_after_the_agent():
    assert place("local", "local") == "your direct chat"
    assert place_of(SimpleNamespace(name="local", direct_agent="local")) == "your direct chat"


def test_a_channel_is_its_name_with_one_hash():
    assert place("general", None) == "#general"
    assert place("#general", None) == "#general"
    assert place("code review", None) == "#code review"


def test_a_room_without_a_name_is_not_shown_by_its_id():
    assert place("!abc:localhost", None) == "a room without a name"
    assert place("  ", None) == "a room without a name"
    assert place(None, None) == "a room without a name"


def test_agents_and_status_say_the_place():
    assert describe_state("busy", place("local", "local")) == "answering in your direct chat"
    assert describe_state("busy", place("general", None)) == "answering in #general"
