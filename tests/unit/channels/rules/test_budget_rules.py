"""bridge/channels/rules/budget_rules.py: periods, the cap, and the words of budgets and usage. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bridge.channels.rules.budget_rules import (
    Whose,
    budget_args,
    budget_from,
    budget_words,
    channel_budget_args,
    over,
    period_end,
    period_of,
    periods,
    refusal,
    stop_line,
    stored_budget,
    usage_note,
)
from config.model import Budget
from store.spend import Spent

NOW = datetime(2026, 12, 31, 22, 30, tzinfo=UTC)
DAY = Budget(5.0, "day")


def test_periods_are_utc_days_and_months():
    assert period_of("day", NOW) == "day:2026-12-31" and period_of("month", NOW) == "month:2026-12"
    assert periods(NOW) == ["day:2026-12-31", "month:2026-12"]
    assert period_end("day", NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_end("month", NOW) == datetime(2027, 1, 1, tzinfo=UTC)
    assert period_end("month", datetime(2026, 2, 3, tzinfo=UTC)) == datetime(2026, 3, 1, tzinfo=UTC)


def test_the_cap_is_the_budget_and_what_was_raised():
    assert not over(DAY, Spent(4.99, 0, "USD", True))
    assert over(DAY, Spent(5.0, 0, "USD", True))
    assert not over(DAY, Spent(6.0, 2.0, "USD", True))
    assert not over(Budget(0.0, "day"), Spent())  # nothing reported: never over, never guessed


def test_the_usage_note():
    assert usage_note(12_300, 200_000, 0.031, "USD") == "context 12.3k/200k · $0.03"
    assert usage_note(900, 0, None, None) == "context 900"


AGENT, CHANNEL = Whose.agent("Alice"), Whose.channel("general")
ONE = Budget(1.0, "day")
SPENT = Spent(1.2, 0, "USD", True)

# the same cases for an agent's budget and a channel's: the words differ only in whose it is
WORDS = {
    AGENT: {
        "stopped": "⛔ stopped: Alice reached its budget, $1.20 of $1.00 today (UTC). "
        "!budget raise AMOUNT lets it go on.",
        "refused": "⛔ Alice has spent its budget today (UTC) ($1.20 of $1.00): it answers again after "
        "2027-01-01 00:00 UTC, or after !budget raise AMOUNT.",
        "over": "Alice: $1.20 of $1.00 today (UTC) — spent: new prompts are refused.",
        "raised": "Alice: $1.20 of $3.00 this month (UTC) (raised by $1.00) — within it.",
        "unreported": "Alice: budget 1.00 today (UTC); it has reported no cost, so it cannot be held to it "
        "(nothing is guessed).",
        "no budget": "Alice has no budget, and has reported no cost today.",
        "no budget, reported": "Alice has no budget; it reported €1.00 today (UTC).",
    },
    CHANNEL: {
        "stopped": "⛔ stopped: #general reached its budget, $1.20 of $1.00 today (UTC). "
        "!budget channel raise AMOUNT lets it go on.",
        "refused": "⛔ #general has spent its budget today (UTC) ($1.20 of $1.00): agents answer here again after "
        "2027-01-01 00:00 UTC, or after !budget channel raise AMOUNT.",
        "over": "#general: $1.20 of $1.00 today (UTC) — spent: new prompts here are refused.",
        "raised": "#general: $1.20 of $3.00 this month (UTC) (raised by $1.00) — within it.",
        "unreported": "#general: budget 1.00 today (UTC); its agents have reported no cost, so it cannot be "
        "held to it (nothing is guessed).",
        "no budget": "#general has no budget, and its agents have reported no cost today.",
        "no budget, reported": "#general has no budget; its agents reported €1.00 today (UTC).",
    },
}


@pytest.mark.parametrize("whose", [AGENT, CHANNEL], ids=["agent", "channel"])
def test_the_words_of_an_agents_and_a_channels_budget(whose):
    words = WORDS[whose]
    assert stop_line(whose, ONE, SPENT) == words["stopped"]
    assert refusal(whose, ONE, SPENT, NOW) == words["refused"]
    assert budget_words(whose, ONE, SPENT) == words["over"]
    assert budget_words(whose, Budget(2.0, "month"), Spent(1.2, 1.0, "USD", True)) == words["raised"]
    assert budget_words(whose, ONE, Spent()) == words["unreported"]
    assert budget_words(whose, None, Spent()) == words["no budget"]
    assert budget_words(whose, None, Spent(1, 0, "EUR", True)) == words["no budget, reported"]


def test_budget_arguments():
    assert budget_args([]) == (None, None)
    assert budget_args(["alice"]) == ("alice", None)
    assert budget_args(["raise", "2.50"]) == (None, 2.5)
    assert budget_args(["alice", "raise", "$3"]) == ("alice", 3.0)
    for bad in (["raise"], ["raise", "lots"], ["raise", "-1"], ["a", "b"], ["raise", "nan"]):
        with pytest.raises(ValueError, match="Usage"):
            budget_args(bad)


def test_channel_budget_arguments():
    assert channel_budget_args([]) == ("show", None, None)
    assert channel_budget_args(["off"]) == ("off", None, None)
    assert channel_budget_args(["raise", "$2"]) == ("raise", None, 2.0)
    assert channel_budget_args(["5", "per", "day"]) == ("set", Budget(5.0, "day"), None)
    assert channel_budget_args(["€20", "per", "Month"]) == ("set", Budget(20.0, "month"), None)
    assert channel_budget_args(["3.5/day"]) == ("set", Budget(3.5, "day"), None)
    for bad in (["5"], ["5", "per", "week"], ["lots", "per", "day"], ["-1/day"], ["raise"], ["raise", "0"], ["on"]):
        with pytest.raises(ValueError, match="Usage: !budget channel"):
            channel_budget_args(bad)


def test_a_stored_channel_budget_reads_back_and_nothing_else_is_a_cap():
    assert budget_from(stored_budget(Budget(2.5, "month"))) == Budget(2.5, "month")
    for bad in (None, "", "{", "[]", '{"cost": 1}', '{"cost": "1", "per": "day"}', '{"cost": -1, "per": "day"}'):
        assert budget_from(bad) is None
