"""The cut (ChatModel.fit) counts each message's tokens once across turns, and cuts where it
would without the counts kept (acp/agents/model.py): a stand-in tokenizer counts its calls."""

from __future__ import annotations

from acp.agents.model import TEMPLATE_RESERVE, ChatModel, fit_window


class CountingLlm:
    """Tokens are words; every tokenize call is recorded."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        self.calls.append(text)
        return [len(word) for word in text.split()]

    def detokenize(self, tokens: list[int]) -> bytes:
        return b" ".join(b"x" * n for n in tokens)


def history(turns: int) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "word " * (10 + i)}
        for i in range(turns)
    ]


def model_with(llm: CountingLlm, n_ctx: int) -> ChatModel:
    model = ChatModel(None, n_ctx=n_ctx, max_tokens=16, states_dir=None)
    model._llm = llm
    return model


def test_each_message_is_tokenized_once_across_turns():
    llm = CountingLlm()
    model = model_with(llm, n_ctx=100_000)
    for turns in range(1, 12):
        model.fit(history(turns))
    assert len(llm.calls) == len(set(llm.calls)) == 11  # one call per distinct message


def test_the_cut_is_the_same_as_counting_every_time():
    llm = CountingLlm()
    model = model_with(llm, n_ctx=400)  # small: the cut moves as the history grows
    budget = 400 - model.answer_tokens() - TEMPLATE_RESERVE

    def count(text: str) -> int:
        return len(text.split())

    def keep_tail(text: str, n: int) -> str:
        return "…" + " ".join(text.split()[-n:])

    start = None
    for turns in range(1, 30):
        messages = history(turns)
        expected, expected_start = fit_window(messages, budget, count, keep_tail, start)
        got, got_start = model.fit(messages, start)
        assert (got, got_start) == (expected, expected_start)
        start = got_start
    assert start and start.first > 0  # the cut did move
