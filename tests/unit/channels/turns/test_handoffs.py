"""Agents handing work to each other: the chain and the loop guard's decisions
(docs/sessions.md "Agents that hand work to each other"). Pure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bridge.channels.turns.handoffs import (
    Call,
    Hop,
    Refusal,
    decide,
    handoff_key,
    is_owner_prompt,
    limit_line,
    parse_handoff_key,
    room_line,
)

CALL = Call(
    caller="alice",
    target="bob",
    caller_prompt="$owner-message",
    caller_turn="t1",
    members=("alice", "bob", "carol"),
    enabled=True,
    limit=3,
)


def test_the_turn_answering_the_owner_hands_the_first_hop():
    assert decide(CALL) == Hop(1, False, "alice", "t1")


def test_a_key_reads_back_as_its_hop():
    hop = Hop(2, True, "alice", "0193abc")
    assert handoff_key(hop) == "handoff:2:s:alice:0193abc"
    assert parse_handoff_key(handoff_key(hop)) == hop


@pytest.mark.parametrize(
    "key", ["$event", "schedule:1:2", "handoff:", "handoff:x:o:a:t", "handoff:1:z:a:t", "handoff:1:o::t", None]
)
def test_other_prompts_are_no_hops(key):
    assert parse_handoff_key(key) is None


def test_each_hop_goes_one_deeper_and_the_limit_ends_the_chain_with_the_room_told():
    prompt, turn = "$owner-message", "t0"
    made = []
    while True:
        decision = decide(replace(CALL, caller_prompt=prompt, caller_turn=turn))
        if isinstance(decision, Refusal):
            break
        made.append(decision.depth)
        prompt, turn = handoff_key(decision), f"t{decision.depth}"
    assert made == [1, 2, 3]
    assert decision.limit and "limits.handoffs" in decision.text


def test_a_limit_of_zero_hands_nothing():
    decision = decide(replace(CALL, limit=0))
    assert isinstance(decision, Refusal) and decision.limit


def test_a_chain_begun_by_a_scheduled_run_says_so_at_every_hop():
    first = decide(replace(CALL, caller_prompt="schedule:abc:1700000000000"))
    assert isinstance(first, Hop) and first.scheduled
    second = decide(replace(CALL, caller="bob", target="alice", caller_prompt=handoff_key(first), caller_turn="t2"))
    assert isinstance(second, Hop) and second.scheduled and second.depth == 2


@pytest.mark.parametrize(
    "change, words",
    [
        ({"target": "alice"}, "yourself"),
        ({"target": "dave"}, "not a member"),
        ({"enabled": False}, "!handoffs off"),
        ({"stopped": True}, "stopped"),
        ({"waiting": ("$a-newer-owner-message",)}, "owner has written since"),
    ],
)
def test_refusals_say_why_and_are_not_the_limit(change, words):
    decision = decide(replace(CALL, **change))
    assert isinstance(decision, Refusal) and words in decision.text and not decision.limit


def test_turns_waiting_for_the_same_message_or_a_schedule_do_not_stop_a_hand_off():
    waiting = ("$owner-message", "schedule:abc:1", "handoff:1:o:bob:t9")
    assert isinstance(decide(replace(CALL, waiting=waiting)), Hop)


def test_owner_prompts_are_neither_hand_offs_nor_scheduled_runs():
    assert is_owner_prompt("$event")
    assert not is_owner_prompt("handoff:1:o:a:t") and not is_owner_prompt("schedule:a:1")


def test_the_room_lines():
    assert room_line("alice", "bob", "review\n  the plan") == "↪ alice → bob: review the plan"
    assert room_line("alice", "bob", "x" * 400).endswith("…")
    assert "at most 3 hand-offs" in limit_line("alice", "bob", 3) and "chain ends" in limit_line("alice", "bob", 3)
