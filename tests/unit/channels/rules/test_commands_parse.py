"""Bridge commands as text (bridge/channels/rules/command_parse.py): no Matrix, no store."""

from __future__ import annotations

import pytest

from bridge.channels.rules.command_parse import (
    AGENTS_USAGE,
    HELP,
    Command,
    agents_change,
    describe_state,
    find_channels,
    format_commands,
    parse,
    resolve_agent,
    split_delete,
)
from store import Channel

ALIASES = {"alice": "alice", "sk_alice": "alice", "bob": "bob", "sk_bob": "bob"}


def test_parse_name_and_words():
    assert parse("!help") == Command("help", ())
    assert parse("  !NEW general alice bob ") == Command("new", ("general", "alice", "bob"))
    assert parse('!new "code review" alice') == Command("new", ("code review", "alice"))
    assert parse("!delete general\nconfirm") == Command("delete", ("general", "confirm"))


def test_parse_unbalanced_quote_falls_back_to_words():
    assert parse('!new "code review alice') == Command("new", ('"code', "review", "alice"))


def test_parse_refuses_what_is_not_a_command():
    for body in ("hello", "! help", "!!", "!", "!1abc", "/alice:review", "hi !help"):
        assert parse(body) is None, body


def test_resolve_agent_accepts_the_ways_people_name_an_agent():
    for token in ("alice", "@alice", "Alice", "@sk_alice:localhost", "sk_alice"):
        assert resolve_agent(token, ALIASES) == "alice", token
    assert resolve_agent("carol", ALIASES) is None
    assert resolve_agent("@", ALIASES) is None


def test_split_delete_needs_the_word_confirm_last():
    assert split_delete(()) == ("", False)
    assert split_delete(("general",)) == ("general", False)
    assert split_delete(("general", "confirm")) == ("general", True)
    assert split_delete(("general", "CONFIRM")) == ("general", True)
    assert split_delete(("my", "room", "confirm")) == ("my room", True)
    assert split_delete(("confirm",)) == ("", True)
    assert split_delete(("confirm", "general")) == ("confirm general", False)


def test_find_channels_by_name_or_room():
    general = Channel("1", "!a:localhost", "General", None, 0)
    other = Channel("2", "!b:localhost", "other", None, 0)
    twin = Channel("3", "!c:localhost", "other", None, 0)
    channels = [general, other, twin]
    assert find_channels(channels, "general") == [general]
    assert find_channels(channels, "#GENERAL") == [general]
    assert find_channels(channels, "!b:localhost") == [other]
    assert find_channels(channels, "other") == [other, twin]
    assert find_channels(channels, "nowhere") == []


def test_describe_state_in_words():
    assert describe_state("stopped") == "stopped"
    assert describe_state("ready") == "ready"
    assert describe_state("starting") == "starting"
    assert describe_state("waiting") == "waiting for a free slot"
    assert describe_state("busy", "#general") == "answering in #general"
    assert describe_state("busy") == "answering"
    assert describe_state("starting", "#general") == "answering in #general"
    assert describe_state("waiting", "#general") == "waiting for a free slot"


def test_format_commands_alone_and_with_several_members():
    commands = [
        {"name": "review", "description": "Review", "input": {"hint": "file"}},
        {"name": "/clear", "description": ""},
        {"name": ""},
    ]
    assert format_commands("alice", commands, several=False) == ["alice:", "  /review <file> — Review", "  /clear"]
    assert format_commands("alice", commands, several=True) == [
        "alice:",
        "  /alice:review <file> — Review",
        "  /alice:clear",
    ]
    assert format_commands("bob", None, several=True) == ["bob: no commands"]
    assert format_commands("bob", [], several=True) == ["bob: no commands"]


def test_help_teaches_every_way_to_send_an_agent_command():
    for text in (
        "/alice:review",
        "@alice /review",
        "//alice:review",
        "!agents",
        "!channels",
        "!new NAME AGENT",
        "!dm AGENT",
        "!delete CHANNEL",
        "!stop",
        "!commands",
    ):
        assert text in HELP, text


def test_session_commands_take_an_optional_agent_and_resume_a_number():
    from bridge.channels.rules.command_parse import BadSessionArgs, SessionArgs, session_args

    assert session_args("sessions", ()) == SessionArgs(None, None)
    assert session_args("sessions", ("@alice",)) == SessionArgs("@alice", None)
    assert session_args("reset", ("bob",)) == SessionArgs("bob", None)
    assert session_args("fork", ()) == SessionArgs(None, None)
    assert session_args("resume", ("2",)) == SessionArgs(None, 2)
    assert session_args("resume", ("alice", "3")) == SessionArgs("alice", 3)
    assert session_args("resume", ("3", "@alice")) == SessionArgs("@alice", 3)
    assert session_args("sessions", ("delete", "2")) == SessionArgs(None, 2, delete=True)
    assert session_args("sessions", ("alice", "delete", "1")) == SessionArgs("alice", 1, delete=True)
    for name, words in [
        ("sessions", ("delete",)),
        ("sessions", ("delete", "0")),
        ("resume", ()),
        ("resume", ("alice",)),
        ("resume", ("0",)),
        ("resume", ("1", "2")),
        ("resume", ("alice", "bob", "1")),
        ("reset", ("alice", "bob")),
        ("reset", ("1",)),
        ("sessions", ("2",)),
        ("fork", ("alice", "now")),
    ]:
        try:
            session_args(name, words)
        except BadSessionArgs as exc:
            assert str(exc).startswith(f"Usage: !{name}"), exc
        else:
            raise AssertionError(f"!{name} {' '.join(words)} was taken")


def test_the_help_names_the_session_commands():
    from bridge.channels.rules.command_parse import CHANNEL_HELP

    for text in ("!sessions", "!resume", "!reset", "!fork"):
        assert text in HELP and text in CHANNEL_HELP, text


def test_threads_switch_reads_on_off_or_nothing():
    from bridge.channels.rules.command_parse import opens_threads, threads_state, threads_switch

    assert threads_switch(()) is None  # !threads alone: the setting is shown
    assert threads_switch(("on",)) is True and threads_switch(("OFF",)) is False
    for bad in (("maybe",), ("on", "off"), ("yes",)):
        with pytest.raises(ValueError, match="Usage: !threads on"):
            threads_switch(bad)
    assert opens_threads("on") and not opens_threads(None) and not opens_threads("off")
    assert threads_state(True).startswith("Threads are on") and threads_state(False).startswith("Threads are off")


def test_help_names_threads():
    from bridge.channels.rules.command_parse import CHANNEL_HELP, HELP

    assert "!threads [on|off]" in CHANNEL_HELP and "!threads [on|off]" in HELP


def test_help_names_every_channel_command_of_every_part():
    # the commands other parts register (bridge/bridge.py hands them to BotCommands): each is
    # in the DM's !help and in the short help a channel gets
    from bridge.channels.commands.budgets import COMMANDS as BUDGETS
    from bridge.channels.rules.command_parse import CHANNEL_HELP, HELP, SESSION_COMMANDS
    from bridge.coding.settings import COMMANDS as SETTINGS
    from bridge.coding.workplaces import COMMANDS as PLACES
    from bridge.voice.spoken import COMMANDS as VOICE

    names = {*BUDGETS, *SESSION_COMMANDS, *SETTINGS, *PLACES, *VOICE}
    assert len(names) >= 10
    missing = sorted(name for name in names if f"!{name}" not in HELP or f"!{name}" not in CHANNEL_HELP)
    assert missing == []


def test_agents_add_and_remove_are_read_and_anything_else_gets_the_usage():
    assert agents_change(("add", "claude-code-acp")) == ("add", "claude-code-acp", None)
    assert agents_change(("add", "opencode", "--cwd", "~/code")) == ("add", "opencode", "~/code")
    assert agents_change(("remove", "claude")) == ("remove", "claude", None)
    for args in [("add",), ("remove", "a", "b"), ("drop", "x"), ("add", "x", "--cwd")]:
        assert agents_change(args) == AGENTS_USAGE


def test_handoffs_switch_reads_on_off_or_nothing_and_is_on_by_default():
    from bridge.channels.rules.command_parse import HANDOFFS_OFF, handoffs_on, handoffs_state, handoffs_switch

    assert handoffs_switch(()) is None  # !handoffs alone: the setting is shown
    assert handoffs_switch(("ON",)) is True and handoffs_switch(("off",)) is False
    for bad in (("maybe",), ("on", "off")):
        with pytest.raises(ValueError, match="!handoffs on"):
            handoffs_switch(bad)
    assert handoffs_on(None) and not handoffs_on(HANDOFFS_OFF)  # nothing stored: on
    assert handoffs_state(True).startswith("Hand-offs are on") and handoffs_state(False).startswith("Hand-offs are off")
