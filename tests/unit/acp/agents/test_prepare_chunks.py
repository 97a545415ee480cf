"""Preparation evaluates in chunks and stops between two as soon as a prompt waits
(acp/agents/model.py, docs/prepare.md): checked in process with a stand-in for llama.cpp's
context that counts what it is asked to evaluate."""

from __future__ import annotations

import threading

from acp.agents.model import ChatModel


class FakeContext:
    def __init__(self, llm: FakeLlm) -> None:
        self.llm = llm

    def kv_cache_seq_rm(self, seq: int, start: int, end: int) -> bool:
        del self.llm.input_ids[start:]
        return True


class FakeLlm:
    """Tokens are words; `eval` appends them, and calls `on_eval` after each call."""

    chat_format = "chat_template.default"

    def __init__(self) -> None:
        self.input_ids: list[int] = []
        self._ctx = FakeContext(self)
        self._requires_eval = False
        self.calls: list[int] = []
        self.on_eval = lambda: None

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    @n_tokens.setter
    def n_tokens(self, n: int) -> None:
        del self.input_ids[n:]

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return [len(word) for word in text.split()]

    def eval(self, tokens: list[int]) -> None:
        self.calls.append(len(tokens))
        self.input_ids.extend(tokens)
        self.on_eval()


def model_with(llm: FakeLlm, tokens: list[int]) -> ChatModel:
    model = ChatModel(None, n_ctx=100_000, states_dir=None)
    model._llm = llm
    model.prefix_tokens = lambda _llm, _messages: list(tokens)  # type: ignore[method-assign]
    return model


MESSAGES = [{"role": "user", "content": "history " * 50}]


def test_a_preparation_runs_to_its_end_in_chunks_when_nothing_waits():
    llm = FakeLlm()
    model = model_with(llm, list(range(1000)))
    stats = model.prepare(MESSAGES, "s", lambda: False, chunk=256)
    assert stats.outcome == "done"
    assert llm.calls == [256, 256, 256, 232]
    assert llm.input_ids == list(range(1000)) and stats.evaluated == 1000


def test_a_waiting_prompt_stops_it_after_the_chunk_under_way():
    llm = FakeLlm()
    model = model_with(llm, list(range(1000)))

    def prompt_arrives() -> None:
        if len(llm.calls) == 2:  # a prompt starts waiting during the second chunk
            model._wait("other", +1)

    llm.on_eval = prompt_arrives
    stats = model.prepare(MESSAGES, "s", lambda: False, chunk=256)
    assert stats.outcome == "preempted"
    assert llm.calls == [256, 256]  # not one chunk more
    assert stats.evaluated == 512
    assert llm._requires_eval  # the prompt re-evaluates at least its last token


def test_a_prompt_waiting_before_it_starts_means_it_evaluates_nothing():
    llm = FakeLlm()
    model = model_with(llm, list(range(1000)))
    model._wait("s", +1)
    assert model.prepare(MESSAGES, "s", lambda: False).outcome == "preempted"
    assert llm.calls == []


def test_it_waits_while_a_prompt_holds_the_model_and_stops_if_told():
    llm = FakeLlm()
    model = model_with(llm, list(range(1000)))
    stop = threading.Event()
    model._busy.acquire()  # a prompt's answer is being generated
    try:
        timer = threading.Timer(0.2, stop.set)
        timer.start()
        assert model.prepare(MESSAGES, "s", stop.is_set).outcome == "preempted"
    finally:
        model._busy.release()
    assert llm.calls == []


def test_what_is_already_evaluated_is_kept_and_only_the_rest_evaluated():
    llm = FakeLlm()
    llm.input_ids = list(range(300)) + [-1, -2]  # a common start, then tokens that differ
    model = model_with(llm, list(range(1000)))
    stats = model.prepare(MESSAGES, "s", lambda: False, chunk=256)
    assert stats.reused == 300 and stats.evaluated == 700
    assert llm.input_ids == list(range(1000))


def test_a_finished_preparation_is_saved_and_one_this_sessions_prompt_waits_for_is_not(monkeypatch):
    """Saved as a turn's state (kept across other sessions' turns and restarts), except when the
    prompt that stopped it is the same session's: the context already holds it for that prompt."""
    saved: list[str] = []
    for waiting, expected in ((None, ["s"]), ("other", ["s"]), ("s", [])):
        saved.clear()
        llm = FakeLlm()
        model = model_with(llm, list(range(600)))
        monkeypatch.setattr(model, "_save", lambda _llm, session, start: saved.append(session))
        if waiting is not None:
            llm.on_eval = lambda model=model, waiting=waiting: model._waiting.setdefault(waiting, 1)
        model.prepare(MESSAGES, "s", lambda: False, chunk=256)
        assert saved == expected, waiting


def test_close_says_whether_llama_cpp_was_left_computing():
    """The agent ends without exit handlers when a chunk outlasts close()'s wait (local_model.main):
    they would tear llama.cpp down under the computing thread."""
    llm = FakeLlm()
    model = model_with(llm, list(range(600)))
    assert model.close(timeout=0.1) is True  # idle
    model = model_with(llm, list(range(600)))
    model._busy.acquire()  # a chunk under way
    try:
        assert model.close(timeout=0.1) is False
        assert model.prompt_waiting()  # and the preparation stops at its next chunk
    finally:
        model._busy.release()
