"""The matrix MCP server's tools as data (bridge/mcp/tools.py): arguments checked with one line
saying what is wrong, and `history` results that read well and stay bounded."""

from datetime import UTC

import pytest

from bridge.mcp.tools import (
    HISTORY_CHARS,
    HISTORY_TOTAL,
    NAMES,
    TOOLS,
    BadArguments,
    check,
    history_text,
    schedule_number,
)


def test_the_tools_and_their_names_are_fixed():
    assert NAMES == ("history", "send_file", "react", "schedule", "schedules", "cancel_schedule", "handoff")
    assert all(t.schema["type"] == "object" for t in TOOLS)


@pytest.mark.parametrize(
    "name, args, normalised",
    [
        ("history", {}, {"limit": 20, "query": None}),
        ("history", {"limit": 5000, "query": "x"}, {"limit": 100, "query": "x"}),  # capped at the limit
        ("history", {"limit": 3.0}, {"limit": 3, "query": None}),
        ("send_file", {"path": "a.txt"}, {"path": "a.txt", "caption": None}),
        ("react", {"event_id": "$e", "key": "👍"}, {"event_id": "$e", "key": "👍"}),
        ("schedule", {"prompt": "p", "in_seconds": 5}, {"prompt": "p", "in_seconds": 5.0}),
        ("schedule", {"prompt": "p", "cron": "0 9 * * *"}, {"prompt": "p", "cron": "0 9 * * *"}),
        ("schedules", None, {}),
        ("cancel_schedule", {"id": "#3"}, {"id": 3}),
    ],
)
def test_good_arguments(name, args, normalised):
    assert check(name, args, 100) == normalised


@pytest.mark.parametrize(
    "name, args, says",
    [
        ("nope", {}, "there is no tool 'nope'"),
        ("history", [], "must be an object"),
        ("history", {"limit": 0}, "`limit` must be a whole number"),
        ("history", {"limit": True}, "`limit` must be a whole number"),
        ("history", {"lmit": 3}, "unknown argument 'lmit'"),
        ("send_file", {}, "`path` is required"),
        ("react", {"event_id": "e", "key": "x"}, "must be a Matrix event id"),
        ("react", {"event_id": "$e", "key": "x" * 65}, "more than 64"),
        ("schedule", {"prompt": "p"}, "exactly one of"),
        ("schedule", {"prompt": "p", "in_seconds": 5, "cron": "* * * * *"}, "exactly one of"),
        ("schedule", {"prompt": "p", "in_seconds": float("inf")}, "`in_seconds` must be a number"),
        ("schedule", {"prompt": "p", "in_seconds": 0}, "`in_seconds` must be a number"),
        ("schedule", {"prompt": " ", "in_seconds": 5}, "`prompt` must be a non-empty string"),
        ("cancel_schedule", {"id": "x"}, "`id` must be a schedule's id"),
    ],
)
def test_bad_arguments_say_what_is_wrong(name, args, says):
    with pytest.raises(BadArguments, match=says.replace("(", r"\(").replace("*", r"\*")):
        check(name, args, 100)


def test_schedule_numbers_as_people_write_them():
    assert schedule_number(2) == schedule_number("2") == schedule_number(" #2 ") == 2
    for bad in (0, -1, "two", None, True):
        with pytest.raises(BadArguments):
            schedule_number(bad)


def test_history_is_newest_last_with_time_and_sender():
    text = history_text([(0, "@me:hs", "first"), (60_000, "alice", "second")], None, UTC)
    assert text.splitlines() == [
        "[1970-01-01 00:00:00 +0000] @me:hs: first",
        "[1970-01-01 00:01:00 +0000] alice: second",
    ]


def test_history_cuts_long_messages_and_drops_the_oldest_past_the_total():
    long = history_text([(0, "a", "x" * (HISTORY_CHARS + 50))], None, UTC)
    assert long.endswith("… [cut]") and len(long) < HISTORY_CHARS + 100
    many = [(i, "a", f"{i:05d} " + "y" * 1000) for i in range(200)]
    text = history_text(many, None, UTC)
    assert len(text) <= HISTORY_TOTAL
    assert "00199" in text.splitlines()[-1] and "00000" not in text


def test_history_says_when_there_is_nothing():
    assert history_text([], None) == "No messages are stored yet."
    assert history_text([], "apple") == "No stored message contains 'apple'."


def test_handoff_takes_an_agent_and_a_request():
    assert check("handoff", {"agent": "@Bob ", "request": "review it"}, 100) == {"agent": "bob", "request": "review it"}
    for bad in ({"agent": "bob"}, {"request": "x"}, {"agent": "", "request": "x"}, {"agent": "bob", "request": 3}):
        with pytest.raises(BadArguments):
            check("handoff", bad, 100)
