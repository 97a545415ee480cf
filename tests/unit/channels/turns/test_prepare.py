"""Which members prepare, and what they are handed (bridge/channels/turns/prepare.py). Pure."""

from __future__ import annotations

import pytest

from bridge.channels.turns.context import UnseenMessage, build_prompt
from bridge.channels.turns.prepare import METHOD, announces, prepare_text, should_prepare
from bridge.channels.turns.turns import unseen_lines

HISTORY = [
    UnseenMessage("user", "@alice the plan?"),
    UnseenMessage("alice", "Three steps." * 200),
    UnseenMessage("user", "ok"),
]


def test_only_an_agent_announcing_the_method_under_our_key_counts():
    assert announces({"sidekicks": {"prepare": METHOD}})
    for meta in (
        None,
        {},
        {"sidekicks": True},
        {"sidekicks": {"prepare": "_other/x"}},
        {"zed.dev": {"prepare": METHOD}},
        "sidekicks",
    ):
        assert not announces(meta), meta


def test_a_running_idle_announcing_member_with_nothing_queued_prepares():
    assert should_prepare("ready", True, 0, 20)


@pytest.mark.parametrize("state", ["stopped", "starting", "busy", "waiting"])
def test_no_agent_is_started_and_none_answering_or_waiting_for_a_slot_prepares(state):
    assert not should_prepare(state, True, 0, 20)


def test_not_when_it_does_not_announce_has_a_turn_queued_or_context_is_off():
    assert not should_prepare("ready", False, 0, 20)
    assert not should_prepare("ready", True, 1, 20)
    assert not should_prepare("ready", True, 0, 0)


def test_the_text_is_the_prompt_without_its_question_byte_for_byte():
    for question in ("what now?", "", "line one\nline two"):
        known = prepare_text("#general", HISTORY, 20, 1500)
        asked = build_prompt("#general", HISTORY, question, 20, 1500)
        assert asked == known + question


def test_the_same_limits_apply_as_to_the_turn():
    many = [UnseenMessage("user", f"message {i} " + "x" * 2000) for i in range(30)]
    known = prepare_text("general", many, 20, 1500)
    assert build_prompt("general", many, "q?", 20, 1500) == known + "q?"
    assert "message 9 " not in known and "message 10 " in known


def test_nothing_unseen_or_no_context_means_nothing_to_prepare():
    assert prepare_text("general", [], 20, 1500) == ""
    assert prepare_text("general", HISTORY, 0, 1500) == ""


class Stored:
    def __init__(self, id: int, role: str, sender: str, text: str) -> None:
        self.id, self.role, self.sender, self.text = id, role, sender, text


def test_the_turn_later_reads_the_same_lines_as_the_preparation():
    """unseen_lines without a current message (preparing), then with the owner's new message
    (the turn): the same history lines, so the prompt begins with the prepared text."""
    stored = [Stored(i, "user" if i % 2 else "agent", "bob", f"m{i}") for i in range(1, 25)]
    before = (stored, stored)
    question = Stored(25, "user", "", "and now?")
    after = (stored + [question], stored + [question])
    for fresh in (True, False):
        prepared = unseen_lines(before, "alice", None, fresh, 20)
        asked = unseen_lines(after, "alice", question.id, fresh, 20)
        assert prepared == asked
