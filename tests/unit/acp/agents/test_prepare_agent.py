"""`_sidekicks/prepare` on the local agent with the real model, over stdio (docs/prepare.md):
announced in `initialize`; a prepared prompt reuses what was evaluated and is answered exactly as
without preparation; a prompt preempts a preparation under way; a restart during one loses
nothing. Counters come from `--log-turns` lines, never from timings."""

from __future__ import annotations

import re

import pytest
from stdio_client import chunks

from acp.agents.local_model import PREPARE_METHOD
from bridge.channels.turns.context import UnseenMessage, build_prompt

pytestmark = pytest.mark.model

TURN = re.compile(r"turn (\S+): prompt (\d+) tokens: (\d+) reused, (\d+) evaluated")
PREPARED = re.compile(r"(\S+): prepare (\w+): (\d+) tokens known, (\d+) reused, (\d+) evaluated")
PREPARING = re.compile(r"preparing (\d+) tokens of (\d+)")
HISTORY = [
    UnseenMessage(
        "user" if i % 2 else "helper", f"Message {i}: " + ("the garden wants water, the roses want sun. " * 12)
    )
    for i in range(3)
]
KNOWN = build_prompt("garden", HISTORY, "")  # what the bridge sends to prepare
QUESTION = "Which flowers want sun?"
ASKED = build_prompt("garden", HISTORY, QUESTION)  # what it sends when the owner asks


def start(start_agent, *extra: str, sessions=None):
    agent = start_agent("--max-tokens", "12", "--log-turns", *extra, sessions=sessions)
    reply = agent.initialize()
    return agent, reply


def prepare(agent, session: str, text: str) -> dict:
    return agent.call(PREPARE_METHOD, {"sessionId": session, "prompt": [{"type": "text", "text": text}]})


def answer(agent, session: str, text: str) -> str:
    reply, updates = agent.prompt(session, text)
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}, reply
    return "".join(chunks(updates))


def test_the_known_start_is_a_prefix_of_the_prompt_the_bridge_sends():
    assert ASKED.startswith(KNOWN) and ASKED[len(KNOWN) :] == QUESTION


def test_it_is_announced_and_a_prepared_prompt_is_answered_as_without_it(start_agent, tmp_path):
    agent, init = start(start_agent)
    assert init["agentCapabilities"]["_meta"]["sidekicks"]["prepare"] == PREPARE_METHOD
    session = agent.new_session()
    assert prepare(agent, session, KNOWN) == {"outcome": "started"}
    done = agent.stderr_matches(PREPARED)[0]
    assert done[1] == session and done[2] == "done"
    known = int(done[3])
    assert int(done[5]) == known > 300  # all of it evaluated now, none before
    prepared = answer(agent, session, ASKED)
    turn = agent.stderr_matches(TURN)[0]
    # the prompt found the prepared tokens: only the question and the template's end are new
    assert int(turn[3]) >= known - 1 and int(turn[4]) <= 40, turn.group(0)

    # the same question without preparation (another agent, same model, temperature 0)
    other, _ = start(start_agent, sessions=tmp_path / "other")
    plain_session = other.new_session()
    plain = answer(other, plain_session, ASKED)
    plain_turn = other.stderr_matches(TURN)[0]
    assert int(plain_turn[3]) == 0 and int(plain_turn[2]) == int(turn[2])  # same prompt tokens
    assert prepared == plain  # and the same answer: nothing it is told changed


def test_a_prompt_preempts_a_preparation_under_way(start_agent):
    agent, _ = start(start_agent)
    session = agent.new_session()
    answer(agent, agent.new_session(), "Hello")  # the model is loaded: the prepare starts at once
    long_known = build_prompt("garden", HISTORY * 3, "")
    prepare(agent, session, long_known)
    agent.stderr_matches(PREPARING)  # it is evaluating
    asked = long_known + QUESTION
    reply, updates = agent.prompt(session, asked)
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"} and chunks(updates)
    done = agent.stderr_matches(PREPARED)[0]
    assert done[2] == "preempted", done.group(0)
    known, reused, evaluated = int(done[3]), int(done[4]), int(done[5])
    assert reused + evaluated < known  # it did not run to its end
    turn = agent.stderr_matches(TURN, count=2)[1]
    assert int(turn[3]) >= reused + evaluated - 1  # what it did evaluate, the prompt reused


def test_a_restart_during_a_preparation_loses_nothing(start_agent, sessions_dir):
    agent, _ = start(start_agent)
    session = agent.new_session()
    answer(agent, session, "Hello")
    prepare(agent, session, build_prompt("garden", HISTORY * 3, ""))
    agent.stderr_matches(PREPARING)
    assert agent.close() == 0  # stdin closed mid-preparation: it exits without waiting for it
    again, _ = start(start_agent)
    again.call("session/load", {"sessionId": session, "cwd": "/", "mcpServers": []})
    assert answer(again, session, ASKED)  # the conversation goes on, answered once
    again.stderr_matches(TURN)  # its stderr is read by a thread of its own: the line may follow the answer
    turns = [m for m in map(TURN.search, again.stderr_lines) if m]
    assert len(turns) == 1
