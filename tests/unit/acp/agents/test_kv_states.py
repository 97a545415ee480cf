"""Per-session KV states of the local agent: the cut that stays put (pure), the state cache and
its files (in process), and the agent over stdio with the real model, counting the tokens a
switch between sessions and a reload after a restart evaluate (`--log-turns`)."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

import pytest
from stdio_client import chunks

from acp.agents.kvstates import PREFIX, Cut, SavedState, StateCache, read_state, write_state
from acp.agents.model import PER_MESSAGE_TOKENS, fit_window

pytestmark = pytest.mark.model

KEY = {"format": 1, "model": {"name": "m.gguf", "size": 1}, "n_ctx": 8192}


# -- the cut (pure) -------------------------------------------------------------------------


def words(text: str) -> int:
    return len(text.split())


def last_words(text: str, n: int) -> str:
    return " ".join(text.split()[-n:])


def msg(role: str, n_words: int, tag: str = "w") -> dict[str, str]:
    return {"role": role, "content": " ".join(f"{tag}{i}" for i in range(n_words))}


def conversation(turns: int, n_words: int = 10) -> list[dict[str, str]]:
    out = []
    for i in range(turns):
        out += [msg("user", n_words, f"u{i}_"), msg("assistant", n_words, f"a{i}_")]
    return out


def test_the_cut_keeps_everything_that_fits_and_then_stays_where_it_was():
    cost = 10 + PER_MESSAGE_TOKENS
    history = conversation(3)  # 6 messages
    assert fit_window(history, 100 * cost, words, last_words) == (history, Cut(0))
    # A cut at message 2 made earlier stays while the messages from there fit, even though
    # older ones would fit too: the prompt starts with the same tokens as before.
    kept, start = fit_window(history, 100 * cost, words, last_words, start=2)
    assert (kept, start) == (history[2:], Cut(2))


def test_the_cut_drops_whole_oldest_messages_leaving_slack_and_never_starts_with_an_answer():
    cost = 10 + PER_MESSAGE_TOKENS
    history = conversation(10)  # 20 messages of `cost` each
    budget = 12 * cost
    kept, start = fit_window(history, budget, words, last_words, slack=0.25)
    # 25 % of the budget is left free: 9 messages fit in 0.75 * 12; the first would be an answer.
    assert start == Cut(12) and kept == history[12:]
    assert kept[0]["role"] == "user"
    # The next turns add messages: the cut stays until they no longer fit...
    longer = history + [msg("user", 10, "x"), msg("assistant", 10, "y"), msg("user", 10, "z")]
    assert fit_window(longer, budget, words, last_words, start=12)[1] == Cut(12)
    # ...then moves on, again to a user message, whole messages only.
    more = longer + [msg("assistant", 10, "p"), msg("user", 10, "q")]
    kept, start = fit_window(more, budget, words, last_words, start=12)
    assert start.first > 12 and start.head == 0 and kept[0]["role"] == "user"
    assert all(m in more for m in kept)
    assert sum(words(m["content"]) + PER_MESSAGE_TOKENS for m in kept) <= budget


def test_the_cut_keeps_the_system_prompt_and_the_end_of_an_overlong_last_message():
    system = {"role": "system", "content": "be brief"}
    history = [system, msg("user", 50), msg("assistant", 50), msg("user", 500)]
    kept, start = fit_window(history, 100, words, last_words, start=0)
    assert kept[0] == system and len(kept) == 2 and start.first == 2
    assert kept[1]["content"].endswith("w499") and words(kept[1]["content"]) <= 100


# -- the state cache and its files (in process) ---------------------------------------------------


def state(n_tokens: int, fill: int = 7, first: int = 0) -> SavedState:
    return SavedState(tokens=list(range(n_tokens)), blob=bytes([fill]) * (100 * n_tokens), first=first)


def test_memory_holds_at_most_its_bound_least_recently_used_evicted_first():
    cache = StateCache(None, KEY, ram_bytes=3 * state(10).size, disk_bytes=0)
    for name in ("a", "b", "c"):
        cache.put(name, state(10))
    assert cache.take("a")[1] == "memory"  # a is now the most recently used
    cache.put("d", state(10))
    assert cache.resident() == ["c", "a", "d"]
    assert cache.take("b") == (None, "none")
    assert cache.resident_bytes <= cache.ram_bytes
    cache.put("big", state(40))  # larger than the whole bound: not kept in memory
    assert "big" not in cache.resident() and cache.resident() == ["c", "a", "d"]


def test_state_files_round_trip_0600_and_are_ignored_when_foreign_or_damaged(tmp_path: Path):
    folder = tmp_path / "sessions"
    cache = StateCache(folder, KEY, ram_bytes=0, disk_bytes=1 << 20)
    cache.put("sess_a", state(50, first=4))
    assert cache.flush(10)
    path = folder / "sess_a.kv"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = StateCache(folder, KEY, ram_bytes=1 << 20, disk_bytes=1 << 20)
    assert again.cut("sess_a") == Cut(4)
    got, source = again.take("sess_a")
    assert source == "disk" and got.tokens == list(range(50)) and bytes(got.blob) == bytes([7]) * 5000
    assert again.take("sess_a")[1] == "memory"

    other = {**KEY, "n_ctx": 4096}  # another context size (or model file): not restored
    assert read_state(path, other) is None
    assert StateCache(folder, other, ram_bytes=1 << 20, disk_bytes=1 << 20).take("sess_a") == (None, "none")
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[-10] ^= 0xFF
    path.write_bytes(bytes(damaged))
    assert read_state(path, KEY) is None  # CRC
    path.write_bytes(data[:-1])
    assert read_state(path, KEY) is None  # truncated
    path.write_bytes(b"not a state file")
    assert read_state(path, KEY) is None
    path.write_bytes(data)
    assert read_state(path, KEY) is not None


def test_the_shared_prefix_is_kept_0600_and_never_reused_for_another_system_prompt_or_model(tmp_path: Path):
    folder = tmp_path / "sessions"
    extra = {"system": "aaaa", "tokens": "bbbb", "n_tokens": 40}
    cache = StateCache(folder, KEY, ram_bytes=1 << 20, disk_bytes=1 << 20)
    assert cache.take_prefix(extra) == (None, "none")
    cache.put_prefix(extra, state(40))
    assert cache.take_prefix(extra)[1] == "memory"
    assert cache.take_prefix({**extra, "system": "cccc"}) == (None, "none")  # another system prompt
    assert cache.flush(10)
    path = folder / f"{PREFIX}.kv"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and cache.resident() == []  # not a session's

    again = StateCache(folder, KEY, ram_bytes=1 << 20, disk_bytes=1 << 20)  # after a restart
    got, source = again.take_prefix(extra)
    assert source == "disk" and got is not None and got.tokens == list(range(40))
    assert again.take_prefix({**extra, "system": "cccc"}) == (None, "none")
    for other in ({**KEY, "model": {"name": "m.gguf", "size": 2}}, {**KEY, "n_ctx": 4096}):
        # another model file or context size: the file is not reused, and a new prefix replaces it
        foreign = StateCache(folder, other, ram_bytes=1 << 20, disk_bytes=1 << 20)
        assert foreign.take_prefix(extra) == (None, "none")
    foreign.put_prefix(extra, state(41))
    assert foreign.flush(10)
    assert StateCache(folder, KEY, ram_bytes=0, disk_bytes=1 << 20).take_prefix(extra) == (None, "none")


def test_disk_holds_at_most_its_bound_oldest_files_deleted_first(tmp_path: Path):
    write_state(tmp_path / "probe.kv", KEY, state(10))
    one = (tmp_path / "probe.kv").stat().st_size  # a file: the state and its header
    (tmp_path / "probe.kv").unlink()
    cache = StateCache(tmp_path, KEY, ram_bytes=0, disk_bytes=int(2.5 * one))
    for i, name in enumerate(("a", "b", "c")):
        cache.put(name, state(10))
        assert cache.flush(10)
        os.utime(tmp_path / f"{name}.kv", (1000 + i, 1000 + i))  # distinct ages
    cache.put("d", state(10))
    assert cache.flush(10)
    assert sorted(p.name for p in tmp_path.glob("*.kv")) == ["c.kv", "d.kv"]
    cache.put_prefix({"system": "s"}, state(2))  # the shared prefix, oldest of all, is kept
    assert cache.flush(10)
    os.utime(tmp_path / f"{PREFIX}.kv", (1, 1))
    cache.put("e", state(10))
    assert cache.flush(10)
    assert sorted(p.name for p in tmp_path.glob("*.kv")) == ["d.kv", "e.kv", f"{PREFIX}.kv"]


def test_forget_deletes_the_state_and_stale_temporaries_go_at_start(tmp_path: Path):
    (tmp_path / ".tmp-x.kv").write_bytes(b"half written")
    cache = StateCache(tmp_path, KEY, ram_bytes=1 << 20, disk_bytes=1 << 20)
    assert not (tmp_path / ".tmp-x.kv").exists()
    cache.put("a", state(10))
    assert cache.flush(10) and (tmp_path / "a.kv").exists()
    cache.forget("a")
    assert not (tmp_path / "a.kv").exists() and cache.take("a") == (None, "none")


def test_write_state_leaves_no_temporary_behind(tmp_path: Path):
    write_state(tmp_path / "x.kv", KEY, state(3))
    assert [p.name for p in tmp_path.iterdir()] == ["x.kv"]


# -- the agent, real model: what a switch and a reload evaluate ----------------------------

TURN = re.compile(
    r"turn (\S+): prompt (\d+) tokens: (\d+) reused, (\d+) evaluated .*"
    r"state from (\w+); history from message (\d+)"
)
LOADED = re.compile(r"^sidekicks-local: model loaded in the background in [\d.]+ s$")
PRIMER = (
    "A note on the garden: the roses need sun in the morning, the tulips want dry soil "
    "in summer, and the old apple tree by the wall is pruned every February. "
) * 12
MAX_ANSWER = 16
# A follow-up turn evaluates only what is new: the end of the previous answer as the template
# writes it, the new user message with its markers, and the assistant header. Nothing near
# the primer's ~450 tokens.
NEW_AT_MOST = MAX_ANSWER + 30


class Turns:
    """The agent's --log-turns lines, read as they come."""

    def __init__(self, agent):
        self.agent = agent
        self.seen = 0

    def next(self, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [m for m in map(TURN.search, self.agent.stderr_lines) if m]
            if len(lines) > self.seen:
                found = lines[self.seen]
                self.seen += 1
                return {
                    "session": found[1],
                    "prompt": int(found[2]),
                    "reused": int(found[3]),
                    "evaluated": int(found[4]),
                    "state": found[5],
                    "start": int(found[6]),
                }
            time.sleep(0.05)
        raise AssertionError(f"no turn line on stderr: {self.agent.stderr_lines[-5:]}")


def ask(agent, turns: Turns, session: str, text: str) -> dict:
    reply, updates = agent.prompt(session, text)
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}, reply
    assert chunks(updates)
    line = turns.next()
    assert line["session"] == session
    assert line["prompt"] == line["reused"] + line["evaluated"]
    return line


def prepared_ahead(agent, session: str, timeout: float = 60.0) -> None:
    """Wait for the agent's own preparation of `session`'s next turn to end (its --log-turns
    line), so that it cannot run late, after another session's turn."""
    mark = f"{session}: next turn, prepare "
    deadline = time.monotonic() + timeout
    while not any(mark in line for line in agent.stderr_lines):
        assert time.monotonic() < deadline, f"no preparation line: {agent.stderr_lines[-5:]}"
        time.sleep(0.05)


def start(start_agent, *extra: str):
    agent = start_agent("--max-tokens", str(MAX_ANSWER), "--log-turns", *extra)
    agent.initialize()
    return agent, Turns(agent)


def test_switching_sessions_evaluates_only_the_new_tokens(start_agent):
    agent, turns = start(start_agent)
    one, two = agent.new_session(), agent.new_session()
    first_one = ask(agent, turns, one, PRIMER + "Which flowers need sun?")
    # no state of its own: the shared prefix (evaluated now, the agent's first session)
    assert first_one["evaluated"] > 400 and first_one["state"] == "prefix"
    first_two = ask(agent, turns, two, "Something else entirely: " + PRIMER + "When is pruning?")
    assert first_two["evaluated"] > 400
    previous = {one: first_one, two: first_two}
    for i in range(3):  # back and forth: each turn follows a turn of the other session
        for session in (one, two):
            line = ask(agent, turns, session, f"And question {i}?")
            # from memory; or already in the context, when the agent's own preparation of this
            # session's next turn ran late, after the other session's turn (a busy machine)
            assert line["state"] in ("memory", "context"), line
            assert line["reused"] >= previous[session]["prompt"], (line, previous[session])
            assert line["evaluated"] <= NEW_AT_MOST, line
            previous[session] = line


def test_without_saved_states_a_switch_evaluates_the_whole_conversation(start_agent):
    """The same switch with the states turned off: the counter sees the difference."""
    agent, turns = start(start_agent, "--kv-ram", "0", "--kv-disk", "0")
    one, two = agent.new_session(), agent.new_session()
    ask(agent, turns, one, PRIMER + "Which flowers need sun?")
    prepared_ahead(agent, one)  # else, on a busy machine, it may put `one` back in the context
    ask(agent, turns, two, "Something else entirely: " + PRIMER + "When is pruning?")
    prepared_ahead(agent, two)
    line = ask(agent, turns, one, "And then?")
    assert line["state"] == "none" and line["evaluated"] > 400, line
    # the same session twice in a row still reuses the context
    line = ask(agent, turns, one, "And after that?")
    assert line["state"] == "context" and line["evaluated"] <= NEW_AT_MOST, line


def test_a_reload_after_a_restart_restores_the_state_from_disk(start_agent, sessions_dir: Path):
    first, turns = start(start_agent)
    session = first.new_session()
    ask(first, turns, session, PRIMER + "Which flowers need sun?")
    before = ask(first, turns, session, "And the tulips?")
    assert first.close() == 0
    path = sessions_dir / f"{session}.kv"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(sessions_dir.stat().st_mode) == 0o700

    second, turns = start(start_agent)
    second.call("session/load", {"sessionId": session, "cwd": "/", "mcpServers": []})
    line = ask(second, turns, session, "And the apple tree?")
    assert line["state"] in {"disk", "memory"}, line  # memory: read ahead at session/load
    assert line["reused"] >= before["prompt"], (line, before)
    assert line["evaluated"] <= NEW_AT_MOST, line
    assert second.close() == 0
    # nothing but the turns' lines and the background load's (no warning, no error)
    assert [x for x in second.stderr_lines if not TURN.search(x) and not LOADED.search(x)] == []


def test_a_state_made_for_another_context_size_is_ignored_silently(start_agent, sessions_dir: Path):
    first, turns = start(start_agent)
    session = first.new_session()
    ask(first, turns, session, PRIMER + "Which flowers need sun?")
    assert first.close() == 0
    assert (sessions_dir / f"{session}.kv").exists()

    second, turns = start(start_agent, "--ctx", "4096")
    second.call("session/load", {"sessionId": session, "cwd": "/", "mcpServers": []})
    line = ask(second, turns, session, "And the tulips?")
    # not the session's state: only the shared prefix, made again for this context
    assert line["state"] == "prefix" and line["evaluated"] > 400, line
    assert second.close() == 0
    assert [
        x for x in second.stderr_lines if not TURN.search(x) and not LOADED.search(x)
    ] == []  # no error, no traceback


def test_a_damaged_state_file_is_ignored_silently(start_agent, sessions_dir: Path):
    first, turns = start(start_agent)
    session = first.new_session()
    ask(first, turns, session, PRIMER + "Which flowers need sun?")
    assert first.close() == 0
    path = sessions_dir / f"{session}.kv"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    second, turns = start(start_agent)
    second.call("session/load", {"sessionId": session, "cwd": "/", "mcpServers": []})
    line = ask(second, turns, session, "And the tulips?")
    # not the session's state: only the shared prefix, made again for this context
    assert line["state"] == "prefix" and line["evaluated"] > 400, line
    assert second.close() == 0
    # nothing but the turns' lines and the background load's (no warning, no error)
    assert [x for x in second.stderr_lines if not TURN.search(x) and not LOADED.search(x)] == []


def test_clear_deletes_the_saved_state(start_agent, sessions_dir: Path):
    agent, turns = start(start_agent)
    session = agent.new_session()
    ask(agent, turns, session, "Say hello")
    path = sessions_dir / f"{session}.kv"
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:  # written in the background
        time.sleep(0.05)
    assert path.exists()
    reply, updates = agent.prompt(session, "/clear")
    assert "cleared" in "".join(chunks(updates)).lower()
    assert not path.exists()
    line = ask(agent, turns, session, "Say hello again")
    assert line["state"] == "none"
