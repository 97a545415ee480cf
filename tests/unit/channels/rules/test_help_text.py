"""`!help`: a few lines for the room it is typed in, `!help all` for the rest, as HTML and as
plain text without Markdown (docs/commands.md)."""

from __future__ import annotations

import re

from bridge.channels.rules.help_text import BOT_DM, bot_help, channel_full_help, full_help, room_help

BOT_COMMANDS = ("!agents", "!channels", "!new", "!dm")


def test_a_channels_help_is_short_names_its_agent_and_none_of_the_bots_commands():
    shown = room_help("#test", ["local", "alice"], direct=False)
    lines = shown.body.splitlines()
    assert 5 <= len(lines) <= 8, shown.body
    assert lines[0] == "What you can do in #test:"
    assert "@local hello" in shown.body and "/local:COMMAND" in shown.body
    assert "!stop" in shown.body and "!help all" in lines[-1]
    assert not any(command in shown.body for command in BOT_COMMANDS)
    assert "<ul>" in shown.html and "<code>@local hello</code>" in shown.html


def test_a_direct_chat_says_its_agent_answers_everything():
    shown = room_help("your direct chat", ["local"], direct=True)
    assert "local answers everything written here" in shown.body


def test_every_channel_command_is_in_a_channels_help_all_and_no_bot_command():
    shown = channel_full_help()
    for typed, _ in BOT_DM.items:
        assert typed not in shown.body
    assert "!sessions" in shown.body and "!budget channel" in shown.body


def test_the_bots_help_is_short_and_its_help_all_has_everything():
    short = bot_help()
    assert 5 <= len(short.body.splitlines()) <= 8, short.body
    assert all(command in short.body for command in BOT_COMMANDS) and "!help all" in short.body
    every = full_help()
    assert all(command in every.body for command in BOT_COMMANDS) and "!steer TEXT" in every.body


def test_no_markdown_and_html_escaped():
    for shown in (room_help("#a<b", ["x"], False), channel_full_help(), full_help(), bot_help()):
        assert "`" not in shown.body and "**" not in shown.body
        assert not re.search(r"<(?!/?(p|ul|li|code|strong)>)", shown.html), shown.html
