"""The local agent loads its model from its start, beside the handshake (docs/performance.md
"The local agent's first token"): the load ends with no prompt sent; a prompt sent while it runs
waits for it and gets the answer, from the same prompt tokens, of an agent whose model had
loaded before the prompt came; an agent stopped during the load exits at once. The real
SmolLM2 over stdio; the load held by tests/agents/local_load_agent.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from stdio_client import chunks

pytestmark = pytest.mark.model

LOAD_AGENT = [sys.executable, str(Path(__file__).resolve().parents[3] / "agents" / "local_load_agent.py")]
LOADED = re.compile(r"model loaded in the background in [\d.]+ s")
WAITING = re.compile(r"gated load: waiting for ")
TURN = re.compile(r"turn (\S+): prompt (\d+) tokens: (\d+) reused, (\d+) evaluated")
QUESTION = "Name a flower that likes shade."


def text_prompt(session: str, text: str) -> dict:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


def test_the_model_loads_once_initialize_is_answered_with_no_prompt_sent(start_agent):
    agent = start_agent("--log-turns")
    agent.initialize()
    agent.stderr_matches(LOADED)  # nothing but initialize was sent
    _, updates = agent.prompt(agent.new_session(), "/model")
    assert "Loaded: yes" in "".join(chunks(updates))


def test_a_prompt_sent_during_the_load_waits_for_it_and_is_answered_as_after_it(start_agent, tmp_path):
    gate = tmp_path / "gate"
    agent = start_agent("--max-tokens", "16", "--log-turns", program=[*LOAD_AGENT, "gate", str(gate)])
    agent.initialize()
    agent.stderr_matches(WAITING)  # the model's load is under way, held at its open
    session, other = agent.new_session(), agent.new_session()
    asked = agent.start_request("session/prompt", text_prompt(session, QUESTION))
    # a slash command needs no model: answered while the prompt sent before it waits (a reply
    # to that prompt meanwhile would be passed over here, and never found below)
    reply, meanwhile = agent.prompt(other, "/help")
    assert reply["result"]["stopReason"] == "end_turn"
    assert not [u for u in meanwhile if u["sessionId"] == session]
    gate.touch()
    updates: list[dict] = []
    answered = agent.wait_reply(asked, updates=updates)
    assert answered["result"]["stopReason"] in {"end_turn", "max_tokens"}, answered
    text = "".join(chunks([u for u in updates if u["sessionId"] == session]))
    assert text.strip()
    held = agent.stderr_matches(TURN)[0]

    plain = start_agent("--max-tokens", "16", "--log-turns", sessions=tmp_path / "plain")
    plain.initialize()
    plain.stderr_matches(LOADED)  # its model loaded before the prompt came
    reply, plain_updates = plain.prompt(plain.new_session(), QUESTION)
    assert reply["result"]["stopReason"] == answered["result"]["stopReason"]
    assert "".join(chunks(plain_updates)) == text  # the same answer
    assert plain.stderr_matches(TURN)[0][2] == held[2]  # from the same prompt tokens


def test_an_agent_stopped_during_the_load_exits_at_once(start_agent, tmp_path):
    agent = start_agent(program=[*LOAD_AGENT, "gate", str(tmp_path / "never")])
    agent.initialize()
    agent.stderr_matches(WAITING)
    assert agent.close(timeout=10) == 0
    assert not [line for line in agent.stderr_lines if "Traceback" in line]
