"""Every new session of the local agent starts from one shared KV state of the prompt's known
start (the chat template's system part and first user header), evaluated once per model,
context size, system prompt and template, kept in memory and beside the session states; what
the model is told does not change (docs/performance.md "The local agent's first token").
Real SmolLM2 over stdio; counters from `--log-turns` lines, never from timings."""

from __future__ import annotations

import re
import shutil
import stat
from pathlib import Path

import pytest
from stdio_client import chunks

from acp.agents.kvstates import PREFIX, read_keyed
from acp.agents.model import default_model_path

pytestmark = pytest.mark.model

TURN = re.compile(r"turn (\S+): prompt (\d+) tokens: (\d+) reused, (\d+) evaluated .*state from (\w+);")
QUESTION = "Name a flower that likes shade."


def turns(agent, count: int, timeout: float = 120.0) -> list[re.Match]:
    return agent.stderr_matches(TURN, count, timeout)


def ask(agent, count: int) -> tuple[str, re.Match]:
    """A new session's first answer to QUESTION, and its turn line (the agent's `count`th)."""
    reply, updates = agent.prompt(agent.new_session(), QUESTION)
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"}, reply
    return "".join(chunks(updates)), turns(agent, count)[-1]


def start(start_agent, *extra: str, sessions: Path | None = None):
    agent = start_agent("--max-tokens", "12", "--log-turns", *extra, sessions=sessions)
    agent.initialize()
    return agent


def prefix_tokens(folder: Path) -> list[int]:
    found = read_keyed(folder / f"{PREFIX}.kv")
    assert found is not None
    return found[1].tokens


def test_a_new_session_reuses_every_prefix_token_and_is_told_and_answers_the_same(
    start_agent, sessions_dir: Path, tmp_path: Path
):
    first = start(start_agent)
    made, made_turn = ask(first, 1)
    assert made_turn[5] == "prefix" and int(made_turn[3]) == 0, made_turn.group(0)  # evaluated now
    # a second new session of the same agent: the context, holding the first session's
    # tokens, already begins with the prefix, and llama-cpp-python reuses it there
    again, again_turn = ask(first, 2)
    assert first.close() == 0
    path = sessions_dir / f"{PREFIX}.kv"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    n = len(prefix_tokens(sessions_dir))
    assert n >= 10  # SmolLM2's default system prompt and the user header

    restarted = start(start_agent)  # after a restart: from disk
    seeded, seeded_turn = ask(restarted, 1)

    # the same question with no saved state at all: its whole prompt evaluated in one go
    plain_agent = start(start_agent, "--kv-ram", "0", "--kv-disk", "0", sessions=tmp_path / "plain")
    plain, plain_turn = ask(plain_agent, 1)
    assert plain_turn[5] == "none" and int(plain_turn[3]) == 0, plain_turn.group(0)
    assert not (tmp_path / "plain" / f"{PREFIX}.kv").exists()

    assert int(again_turn[3]) >= n, again_turn.group(0)
    assert seeded_turn[5] == "prefix", seeded_turn.group(0)
    assert int(seeded_turn[3]) == n, seeded_turn.group(0)  # every prefix token reused
    assert int(seeded_turn[4]) == int(plain_turn[2]) - n, seeded_turn.group(0)  # only the rest evaluated
    for turn in (made_turn, again_turn, seeded_turn):
        assert int(turn[2]) == int(plain_turn[2]), turn.group(0)  # the same prompt tokens
    assert made == again == seeded == plain  # and the same answer: what it is told did not change


def test_a_changed_system_prompt_or_context_size_never_reuses_a_stale_prefix(start_agent, sessions_dir: Path):
    first = start(start_agent)
    ask(first, 1)
    assert first.close() == 0
    default = prefix_tokens(sessions_dir)

    terse = start(start_agent, "--system", "You answer in five words.")
    _, turn = ask(terse, 1)
    assert turn[5] == "prefix" and int(turn[3]) == 0, turn.group(0)  # made anew, nothing reused
    assert terse.close() == 0
    changed = prefix_tokens(sessions_dir)
    assert changed != default  # the new system prompt's prefix replaced the stale one

    smaller = start(start_agent, "--system", "You answer in five words.", "--ctx", "4096")
    _, turn = ask(smaller, 1)
    assert turn[5] == "prefix" and int(turn[3]) == 0, turn.group(0)  # another context: made anew
    assert smaller.close() == 0

    same = start(start_agent, "--system", "You answer in five words.", "--ctx", "4096")
    _, turn = ask(same, 1)
    assert turn[5] == "prefix" and int(turn[3]) == len(changed), turn.group(0)  # now reused


def test_another_model_file_never_reuses_a_stale_prefix(start_agent, sessions_dir: Path, tmp_path: Path):
    first = start(start_agent)
    ask(first, 1)
    assert first.close() == 0
    model = default_model_path()
    assert model is not None
    copy = tmp_path / "other.gguf"  # the same weights, but another file: another model to the key
    shutil.copyfile(model, copy)
    other = start(start_agent, "--model", str(copy))
    _, turn = ask(other, 1)
    assert turn[5] == "prefix" and int(turn[3]) == 0, turn.group(0)  # made anew, nothing reused


def test_the_default_system_prompt_is_in_the_shared_prefix_and_the_first_prompt_reuses_it(
    start_agent, sessions_dir: Path
):
    """The shipped agent says what it is (docs/configuration.md "The shipped local agent"): its system prompt is
    in the tokens every new session starts from, and a first prompt reuses all of them."""
    from llama_cpp import Llama

    from acp.agents.local_model import system_prompt

    first = start(start_agent)
    ask(first, 1)  # the prefix is made and kept
    agent = start(start_agent)  # a new process: the first prompt starts from the kept prefix
    reply, updates = agent.prompt(agent.new_session(), QUESTION)
    turn = turns(agent, 1)[-1]
    assert first.close() == 0 and agent.close() == 0
    tokens = prefix_tokens(sessions_dir)
    model = default_model_path()
    assert model is not None
    vocab = Llama(model_path=str(model), vocab_only=True, verbose=False)
    told = vocab.detokenize(tokens).decode("utf-8", "replace")
    default = system_prompt(None, default_model=True)
    assert default is not None and "SmolLM2" in default and "Matrix" in default
    assert default in told, told  # the default system prompt, in the first prompt's tokens
    assert turn[5] == "prefix" and int(turn[3]) == len(tokens), turn.group(0)  # reused, every token
    used = [u["update"] for u in updates if u["update"].get("sessionUpdate") == "usage_update"]
    assert used and 0 < used[-1]["used"] <= used[-1]["size"], used  # the context it reports
    assert used[-1]["used"] >= int(turn[2]), used


def test_system_overrides_the_default_and_an_empty_one_leaves_the_templates_own():
    from acp.agents.local_model import system_prompt

    assert system_prompt("You answer in five words.", default_model=True) == "You answer in five words."
    assert system_prompt("", default_model=True) is None
    other = system_prompt(None, default_model=False)
    assert other is not None and "SmolLM2" not in other and "offline" in other
