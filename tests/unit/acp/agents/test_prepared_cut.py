"""A prepared session's question evaluates only what is new, however long the history and
whatever the window (docs/prepare.md "The cut"): the preparation places the cut leaving room for
the question, and the question's prompt keeps that cut — whole messages, or the characters left
out of the start of a last message longer than the window. Pure with a word count; then by
tokens with the real model (`--log-turns`), never by time."""

from __future__ import annotations

import re

import pytest
from stdio_client import chunks

from acp.agents.kvstates import Cut
from acp.agents.local_model import PREPARE_METHOD
from acp.agents.model import PER_MESSAGE_TOKENS, fit_window
from bridge.channels.turns.context import UnseenMessage, build_prompt

QUESTION = "What do you make of all this, in one line?"


def words(text: str) -> int:
    return len(text.split())


def last_words(text: str, n: int) -> str:
    """The end of `text` with its last `n` words, as it is (the model's keep_tail keeps its last
    tokens the same way)."""
    starts = [m.start() for m in re.finditer(r"\S+", text)]
    return "…" + text[starts[-n] :] if 0 < n < len(starts) else "…" + text


def exchange(n_words: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": " ".join(["hello"] * n_words)},
        {"role": "assistant", "content": " ".join(["hi"] * n_words)},
    ]


def full_history(n_messages: int = 20, n_words: int = 250) -> str:
    """A channel's full history (20 × 1,500 characters) in the bridge's own frame, no question."""
    unseen = [
        UnseenMessage("user" if i % 2 else "bob", " ".join(f"m{i}w{j}" for j in range(n_words)))
        for i in range(n_messages)
    ]
    return build_prompt("general", unseen, "")


def prepared_then_asked(history: list[dict[str, str]], known: str, budget: int, reserve: int):
    """(the preparation's messages and cut, the question's) as the local agent makes them."""
    prepared, cut = fit_window(
        history + [{"role": "user", "content": known}], budget, words, last_words, reserve=reserve
    )
    asked = history + [{"role": "user", "content": known + QUESTION}]
    return (prepared, cut), fit_window(asked, budget, words, last_words, start=cut)


@pytest.mark.parametrize("budget", [300, 800, 2000, 4000])
def test_an_overlong_history_is_cut_at_the_same_place_for_the_preparation_and_the_question(budget):
    known = full_history()  # ~5,000 words: longer than every window here
    (prepared, cut), (asked, asked_cut) = prepared_then_asked(exchange(5), known, budget, reserve=budget // 8)
    assert cut.first == 2 and cut.head > 0  # only the end of the last message fits
    assert asked_cut == cut
    # the question's prompt is the prepared one and the question: the same start, token for token
    assert asked[:-1] == prepared[:-1]
    assert asked[-1]["content"] == prepared[-1]["content"] + QUESTION
    assert sum(words(m["content"]) + PER_MESSAGE_TOKENS for m in asked) <= budget


def test_without_room_for_the_question_the_cut_moves_and_every_token_is_read_again():
    """The scene as it was: the preparation cut for an empty question, the question then cut
    elsewhere, so nothing prepared was reused."""
    known = full_history()
    (prepared, cut), (asked, asked_cut) = prepared_then_asked(exchange(5), known, 800, reserve=0)
    assert asked_cut != cut and not asked[-1]["content"].startswith(prepared[-1]["content"][:50])


def test_a_history_that_fits_only_without_the_question_is_cut_in_whole_messages_ahead():
    budget = 1000
    history = exchange(400)  # the earlier exchange: 800 words of the 1,000
    known = full_history(n_messages=2, n_words=60)
    (prepared, cut), (asked, asked_cut) = prepared_then_asked(history, known, budget, reserve=100)
    assert cut == Cut(2) and asked_cut == cut  # the exchange dropped by the preparation already
    assert asked[:-1] == prepared[:-1] and asked[-1]["content"].startswith(prepared[-1]["content"])
    # no room kept for the question: a preparation that just fits keeps the exchange, and the
    # question, a few words more, drops it
    used = sum(words(m["content"]) + PER_MESSAGE_TOKENS for m in history) + words(known) + PER_MESSAGE_TOKENS
    just_fits = known + "x " * (budget - used)
    (_, cut), (_, asked_cut) = prepared_then_asked(history, just_fits, budget, reserve=0)
    assert cut == Cut(0) and asked_cut != cut


def test_the_next_turn_keeps_the_cut_inside_the_long_message():
    known = full_history()
    (_, cut), (asked, asked_cut) = prepared_then_asked(exchange(5), known, 800, reserve=100)
    later = exchange(5) + [
        {"role": "user", "content": known + QUESTION},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": "and then?"},
    ]
    kept, again = fit_window(later, 800, words, last_words, start=asked_cut)
    assert again == cut and kept[1]["content"] == asked[-1]["content"]


# -- by tokens, with the real model ------------------------------------------------------------

TURN = re.compile(r"turn (\S+): prompt (\d+) tokens: (\d+) reused, (\d+) evaluated")
PREPARED = re.compile(r"(\S+): prepare (\w+): (\d+) tokens known, (\d+) reused, (\d+) evaluated")
FULL_HISTORY = build_prompt(
    "general",
    [
        UnseenMessage(
            "user" if i % 2 else "bob", f"Message {i}: " + ("the garden wants water, roses want sun. " * 40)[:1488]
        )
        for i in range(20)
    ],
    "",
)


@pytest.mark.model
@pytest.mark.parametrize("max_tokens", [None, "24"])
def test_a_prepared_question_evaluates_only_its_own_tokens(start_agent, max_tokens):
    """20 unseen messages of ~1,500 characters (~7,000 tokens) in a 1,024-token window: the
    history is cut, for the preparation and the question alike."""
    extra = ("--max-tokens", max_tokens) if max_tokens else ()
    agent = start_agent("--ctx", "1024", "--log-turns", *extra)
    agent.initialize()
    session = agent.new_session()
    reply, updates = agent.prompt(session, "say hello")
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"} and chunks(updates)
    agent.call(PREPARE_METHOD, {"sessionId": session, "prompt": [{"type": "text", "text": FULL_HISTORY}]})
    done = agent.stderr_matches(PREPARED)[0]  # the bridge's request (not the agent's own, "next turn")
    assert done[2] == "done" and int(done[3]) > 200, done.string
    reply, updates = agent.prompt(session, FULL_HISTORY + QUESTION)
    assert reply["result"]["stopReason"] in {"end_turn", "max_tokens"} and chunks(updates)
    turn = agent.stderr_matches(TURN, count=2)[1]
    # the question (~12 tokens) and the template around it; before, the whole window again
    assert int(turn[4]) <= 30 and int(turn[3]) >= int(done[3]) - 1, turn.string
