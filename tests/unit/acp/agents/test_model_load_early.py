"""The model loads in the background from the agent's start (acp/agents/model.py
`ChatModel.start_loading`, docs/performance.md "The local agent's first token"): llama_cpp's
import at once, the model's file and context once allowed; a prompt that comes during the load
waits for it and is answered, by the one model loaded; a stop during the load ends the process
without its exit handlers; a session's state file read meanwhile is kept only for its model.
Checked in process with stand-ins for llama_cpp's import and its Llama."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from acp.agents.kvstates import SavedState, write_state
from acp.agents.model import ChatModel, ModelError

KEY = {"model": "stand-in", "n_ctx": 100_000}
MESSAGES = [{"role": "user", "content": "hello there"}]


class FakeLlm:
    """Tokens are words; a completion echoes the last message, word by word."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.n_tokens = 0

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return [len(word) for word in text.split()]

    def eval(self, tokens: list[int]) -> None:
        self.n_tokens += len(tokens)

    def create_chat_completion(self, messages, **options):
        self.log.append("completion")
        for word in messages[-1]["content"].split():
            yield {"choices": [{"delta": {"content": word + " "}, "finish_reason": None}]}
        yield {"choices": [{"delta": {}, "finish_reason": "stop"}]}


class SpyLock:
    """The model's load lock, telling which threads asked for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: list[str] = []

    def __enter__(self) -> SpyLock:
        self.asked.append(threading.current_thread().name)
        self.lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()


class StandIn:
    """A ChatModel on a stand-in GGUF whose import and open are recorded, the open held until
    `release` is set."""

    def __init__(self, tmp_path: Path, states_dir: Path | None = None, fail: bool = False) -> None:
        gguf = tmp_path / "stand-in.gguf"
        gguf.write_bytes(b"GGUF")
        self.model = ChatModel(gguf, n_ctx=100_000, states_dir=states_dir)
        self.log: list[str] = []
        self.release = threading.Event()
        self.opening = threading.Event()
        self.opens = 0
        self.lock = SpyLock()
        self.model._load_lock = self.lock  # type: ignore[assignment]
        self.model._import_llama_cpp = lambda: self.log.append("import")  # type: ignore[method-assign]
        self.model._state_key = lambda llm: dict(KEY)  # type: ignore[method-assign]

        def open_model() -> FakeLlm:
            self.opens += 1
            self.log.append("open begins")
            self.opening.set()
            assert self.release.wait(30), "the test never released the load"
            self.log.append("open ends")
            if fail:
                raise ModelError("cannot load model stand-in.gguf: not a GGUF file")
            return FakeLlm(self.log)

        self.model._open = open_model  # type: ignore[method-assign]


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def answer(model: ChatModel) -> list:
    return list(model.stream(MESSAGES, lambda: False))


def test_the_import_begins_at_once_and_the_open_once_allowed_before_any_prompt(tmp_path):
    stand_in = StandIn(tmp_path)
    allowed = threading.Event()
    ended: list[BaseException | None] = []
    stand_in.model.start_loading(allowed, ended.append)
    wait_until(lambda: stand_in.log == ["import"])
    assert not stand_in.opening.is_set()  # it waits for `allowed` (initialize answered)
    allowed.set()
    assert stand_in.opening.wait(10)  # the model loads, and no prompt was ever sent
    assert stand_in.model.loading and not stand_in.model.loaded
    assert "loading now" in stand_in.model.describe()
    stand_in.release.set()
    wait_until(lambda: ended == [None])
    assert stand_in.model.loaded and not stand_in.model.loading


def test_a_prompt_during_the_load_waits_for_it_and_is_answered_by_the_model_loaded(tmp_path):
    stand_in = StandIn(tmp_path)
    stand_in.model.start_loading()
    assert stand_in.opening.wait(10)
    pieces: list = []
    prompt = threading.Thread(target=lambda: pieces.extend(answer(stand_in.model)), name="prompt")
    prompt.start()
    wait_until(lambda: "prompt" in stand_in.lock.asked)  # the prompt waits for the load's lock
    assert not pieces and prompt.is_alive()
    stand_in.release.set()
    prompt.join(10)
    assert "".join(p.text for p in pieces) == "hello there "
    assert pieces[-1].finish_reason == "stop"
    assert stand_in.opens == 1  # loaded once: the prompt took the model the background loaded
    assert stand_in.log == ["import", "open begins", "open ends", "completion"]


def test_a_failed_load_is_tried_again_by_the_first_prompt_which_says_why(tmp_path):
    stand_in = StandIn(tmp_path, fail=True)
    stand_in.release.set()
    ended: list[BaseException | None] = []
    stand_in.model.start_loading(done=ended.append)
    wait_until(lambda: len(ended) == 1)
    assert isinstance(ended[0], ModelError)
    with pytest.raises(ModelError, match="not a GGUF file"):
        answer(stand_in.model)
    assert stand_in.opens == 2  # as without the background load: the prompt's own attempt


def test_a_stop_during_the_load_skips_the_exit_handlers_and_one_not_begun_never_begins(tmp_path):
    loading = StandIn(tmp_path)
    loading.model.start_loading()
    assert loading.opening.wait(10)
    assert loading.model.close(timeout=0.1) is False  # llama.cpp is busy: exit without handlers
    loading.release.set()

    waiting = StandIn(tmp_path)
    allowed = threading.Event()
    ended: list[BaseException | None] = []
    waiting.model.start_loading(allowed, ended.append)
    wait_until(lambda: waiting.log == ["import"])
    assert waiting.model.close(timeout=0.1) is True  # nothing in llama.cpp: a normal exit
    allowed.set()
    waiting.model._loader.join(10)
    assert ended == [] and waiting.opens == 0 and not waiting.model.loaded


def test_no_model_file_means_no_background_load(tmp_path):
    model = ChatModel(tmp_path / "missing.gguf")
    model.start_loading()
    assert not model.loading and model._loader is None


def test_a_state_file_read_during_the_load_is_kept_for_its_model_only(tmp_path):
    states = tmp_path / "sessions"
    states.mkdir()
    mine = SavedState(tokens=[1, 2, 3], blob=b"kv-of-mine", first=0)
    write_state(states / "s-mine.kv", KEY, mine)
    write_state(states / "s-other.kv", {**KEY, "model": "another"}, SavedState(tokens=[9], blob=b"kv"))
    stand_in = StandIn(tmp_path, states_dir=states)
    stand_in.model.start_loading()
    assert stand_in.opening.wait(10)
    warms = [
        threading.Thread(target=stand_in.model.warm, args=(session,), name=f"warm-{session}")
        for session in ("s-mine", "s-other")
    ]
    for warm in warms:
        warm.start()
    # both files are read while the model loads, before their warm threads wait for it
    wait_until(lambda: {"warm-s-mine", "warm-s-other"} <= set(stand_in.lock.asked))
    assert set(stand_in.model._early) == {"s-mine", "s-other"}
    stand_in.release.set()
    for warm in warms:
        warm.join(10)
    cache = stand_in.model.states
    assert cache is not None and cache.resident() == ["s-mine"]
    state, where = cache.take("s-mine")
    assert where == "memory" and state is not None and bytes(state.blob) == b"kv-of-mine"
    assert cache.take("s-other") == (None, "none")  # made for another model: not restored
    assert stand_in.model._early == {}


def test_clear_during_the_load_drops_the_state_read_meanwhile(tmp_path):
    states = tmp_path / "sessions"
    states.mkdir()
    write_state(states / "s.kv", KEY, SavedState(tokens=[1, 2], blob=b"kv"))
    stand_in = StandIn(tmp_path, states_dir=states)
    stand_in.model.start_loading()
    assert stand_in.opening.wait(10)
    warm = threading.Thread(target=stand_in.model.warm, args=("s",), name="warm")
    warm.start()
    wait_until(lambda: "warm" in stand_in.lock.asked)
    stand_in.model.forget("s")  # /clear
    stand_in.release.set()
    warm.join(10)
    assert stand_in.model.states is not None and stand_in.model.states.take("s") == (None, "none")
