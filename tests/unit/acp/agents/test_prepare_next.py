"""After an answer the local agent evaluates the start of the session's next prompt (the
answer's end, the template's next user header) while the owner reads, and what it is told does
not change (docs/performance.md "The local agent's first token"). Real SmolLM2 over stdio;
counters from `--log-turns` lines, never from timings."""

from __future__ import annotations

import re

import pytest
from stdio_client import chunks

pytestmark = pytest.mark.model

TURN = re.compile(r"turn (\S+): prompt (\d+) tokens: (\d+) reused, (\d+) evaluated")
AHEAD = re.compile(r"(\S+): next turn, prepare (\w+): (\d+) tokens known, (\d+) reused, (\d+) evaluated")
FIRST, SECOND = "Name a flower that likes shade.", "And one that likes sun?"


def answer(agent, session: str, text: str) -> str:
    reply, updates = agent.prompt(session, text)
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}, reply
    return "".join(chunks(updates))


def start(start_agent, *extra: str, sessions=None):
    agent = start_agent("--max-tokens", "12", "--log-turns", *extra, sessions=sessions)
    agent.initialize()
    return agent


def test_the_next_turns_start_is_evaluated_after_an_answer_and_reused(start_agent):
    agent = start(start_agent)
    session = agent.new_session()
    answer(agent, session, FIRST)
    ahead = agent.stderr_matches(AHEAD)[0]
    assert ahead[1] == session and ahead[2] == "done", ahead.group(0)
    known, evaluated = int(ahead[3]), int(ahead[5])
    assert evaluated >= 3  # at least the answer's end and the next user header
    answer(agent, session, SECOND)
    second = agent.stderr_matches(TURN, count=2)[1]
    # the next prompt found every prepared token: only the question and the template's end are new
    assert int(second[3]) >= known, (ahead.group(0), second.group(0))
    assert int(second[4]) <= 25, second.group(0)


def test_the_next_turn_is_told_and_answers_the_same_as_without_it(start_agent, tmp_path):
    agent = start(start_agent)
    session = agent.new_session()
    first = answer(agent, session, FIRST)
    agent.stderr_matches(AHEAD)
    prepared = answer(agent, session, SECOND)
    prepared_turn = agent.stderr_matches(TURN, count=2)[1]

    # the same conversation, the second question asked of a new process with no saved state:
    # it evaluates its whole prompt, nothing prepared
    plain_dir = tmp_path / "plain"
    other = start(start_agent, "--kv-disk", "0", sessions=plain_dir)
    plain_session = other.new_session()
    assert answer(other, plain_session, FIRST) == first
    assert other.close() == 0
    again = start(start_agent, "--kv-disk", "0", sessions=plain_dir)
    again.call("session/load", {"sessionId": plain_session, "cwd": "/", "mcpServers": []})
    plain = answer(again, plain_session, SECOND)
    plain_turn = again.stderr_matches(TURN)[0]
    assert int(plain_turn[3]) == 0, plain_turn.group(0)  # nothing reused
    assert int(plain_turn[2]) == int(prepared_turn[2])  # the same prompt tokens
    assert plain == prepared  # and the same answer: what it is told did not change
