"""The local agent with timestamps: `python traced_agent.py TRACE [--no-ahead] [--as-before] [options…]`.

`--no-ahead` turns off the agent's own preparation of the next turn after an answer (to measure
what it saves, beside the agent as shipped). `--as-before` starts the agent as it started before
its model loaded in the background: the whole ACP client imported with the package (what
`acp/__init__.py` imported then), no background load (the model loads at `session/load` or at
the first prompt), no state file read while the model loads.

Runs `acp.agents.local_model` unchanged, with time.perf_counter() stamps (CLOCK_MONOTONIC: the
same clock in every process of the machine) around each step of a prompt up to its first chunk
on stdout. One JSON line per prompt is appended to TRACE_FILE when its first chunk is written:
{"token": the prompt's last bench token, "stamps": {step: t}, "info": {…}}. Used by
bench_first_token.py; nothing here changes what the agent does or is told.

    initialize, session   (the first prompt of a process) initialize and session/new or
                session/load received
    read        the reader thread's os.read that brought the prompt's last bytes
    parsed      the message dispatched on the event loop (LocalModelAgent.received)
    handler     LocalModelAgent.prompt entered
    thread      the generation thread's ChatModel.stream entered
    fit_start / fit_end             ChatModel.fit: the cut (tokens counted message by message)
    restored    ChatModel._restore returned (the session's KV state in the context)
    completion  create_chat_completion called (the chat template follows)
    tokenize_start / tokenize_end   the prompt's tokenization (the longest tokenize call)
    eval_start / eval_end           the prompt's llama.cpp evals (its new tokens; before them, the
                                    shared prefix's when the turn makes it), up to the first sample
    sample_start / sample_end       the first token sampled
    piece       the first Piece with text yielded by ChatModel.stream (in the thread)
    say         the first turn.say on the event loop
    written     the first agent_message_chunk written to stdout

The first prompt of a process also carries the process's own stamps (each once):

    agent_start     this script's first line ran (Python and its site are up)
    agent_ready     the agent's modules are imported: local_model.main begins
    import_start / import_end   llama_cpp imported (the first part of the model's load)
    open_start / open_end       the GGUF file and its context loaded (ChatModel._open)

and in its info the CPU time of the import and of the open (their threads'), and of the whole
process up to its first chunk written.
"""

from __future__ import annotations

import time

AGENT_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from acp import agent_kit  # noqa: E402
from acp.agents import local_model, model  # noqa: E402

now = time.perf_counter
TOKEN = re.compile(r"bench-[a-z0-9-]+")
TRACE = Path(sys.argv[1])
_lock = threading.Lock()
_current: dict = {}  # the prompt being traced: {"token", "stamps", "info"}
_last_read = [0.0]
# the process's own stamps and CPU times, carried by its first prompt (each kept once)
_boot: dict[str, float] = {"agent_start": AGENT_START}
_boot_info: dict[str, float] = {}
_first_prompt = [True]


def boot(name: str, cpu_name: str | None = None, cpu: float | None = None) -> None:
    with _lock:
        _boot.setdefault(name, now())
        if cpu_name is not None and cpu is not None:
            _boot_info.setdefault(cpu_name, cpu)


def stamp(name: str, **info) -> None:
    with _lock:
        if not _current:
            return
        _current["stamps"].setdefault(name, now())
        for key, value in info.items():
            _current["info"].setdefault(key, value)


class _Os:
    """agent_kit's `os`, with each read stamped (its reader thread calls os.read)."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def read(fd: int, n: int) -> bytes:
        data = os.read(fd, n)
        _last_read[0] = now()
        return data


agent_kit.os = _Os()  # type: ignore[assignment]

original_received = local_model.LocalModelAgent.received


def received(self, message):
    if message.get("method") == "session/prompt":
        blocks = (message.get("params") or {}).get("prompt") or []
        tokens = TOKEN.findall("".join(b.get("text", "") for b in blocks if isinstance(b, dict)))
        with _lock:
            _current.clear()
            _current.update({"token": tokens[-1] if tokens else "", "stamps": {"read": _last_read[0]}, "info": {}})
            if _opened[0]:  # the first prompt after the agent started (cold): when it began
                _current["stamps"].update({"initialize": _opened[1], "session": _opened[0]})
                _opened[0] = 0.0
            if _first_prompt[0]:
                _current["first"] = True
                _first_prompt[0] = False
        stamp("parsed")
    return original_received(self, message)


local_model.LocalModelAgent.received = received

_opened = [0.0, 0.0]  # when the last session/new or session/load, and initialize, arrived
original_new, original_load = local_model.LocalModelAgent.new_session, local_model.LocalModelAgent.load
original_initialize = local_model.LocalModelAgent.initialize


async def initialize(self, params):
    _opened[1] = now()
    return await original_initialize(self, params)


async def new_session(self, *args, **kwargs):
    _opened[0] = now()
    return await original_new(self, *args, **kwargs)


async def load(self, *args, **kwargs):
    _opened[0] = now()
    return await original_load(self, *args, **kwargs)


local_model.LocalModelAgent.initialize = initialize
local_model.LocalModelAgent.new_session = new_session
local_model.LocalModelAgent.load = load

original_prompt = local_model.LocalModelAgent.prompt


async def prompt(self, turn):
    stamp("handler", model_loaded=self.model.loaded)
    return await original_prompt(self, turn)


local_model.LocalModelAgent.prompt = prompt

original_stream = model.ChatModel.stream


def stream(self, *args, **kwargs):
    stamp("thread")
    for piece in original_stream(self, *args, **kwargs):
        if piece.text:
            stamp("piece")
        if piece.stats is not None:
            stamp("end", prompt_tokens=piece.stats.prompt_tokens, evaluated=piece.stats.evaluated)
        yield piece


model.ChatModel.stream = stream

original_fit = model.ChatModel.fit


def fit(self, *args, **kwargs):
    stamp("fit_start")
    try:
        return original_fit(self, *args, **kwargs)
    finally:
        stamp("fit_end")


model.ChatModel.fit = fit

original_restore = model.ChatModel._restore


def restore(self, *args, **kwargs):
    source = original_restore(self, *args, **kwargs)
    stamp("restored", state=source)
    return source


model.ChatModel._restore = restore

original_import = model.ChatModel._import_llama_cpp


def import_llama_cpp():
    if "import_end" in _boot:
        return original_import()
    cpu = time.thread_time()
    boot("import_start")
    original_import()
    boot("import_end", "import_cpu", time.thread_time() - cpu)


model.ChatModel._import_llama_cpp = staticmethod(import_llama_cpp)  # type: ignore[method-assign]

original_open = model.ChatModel._open


def open_model(self):
    model.ChatModel._import_llama_cpp()  # done already, unless this open is the first step of a load
    started = now()
    boot("open_start")
    cpu = time.thread_time()
    llm = original_open(self)
    boot("open_end", "open_cpu", time.thread_time() - cpu)
    stamp("model_loaded", load_s=now() - started)
    completion, tokenize, evaluate, sample = llm.create_chat_completion, llm.tokenize, llm.eval, llm.sample
    longest = [0]

    def create_chat_completion(*args, **kwargs):
        longest[0] = 0
        stamp("completion")
        return completion(*args, **kwargs)

    def tokenize_(text, *args, **kwargs):
        t0 = now()
        tokens = tokenize(text, *args, **kwargs)
        t1 = now()
        with _lock:
            if _current and "completion" in _current["stamps"] and "eval_start" not in _current["stamps"]:
                if len(text) > longest[0]:  # the prompt: the longest text tokenized before the eval
                    longest[0] = len(text)
                    _current["stamps"]["tokenize_start"], _current["stamps"]["tokenize_end"] = t0, t1
        return tokens

    def eval_(tokens):
        # every evaluation before the first token is sampled is the prompt's: the shared
        # prefix's, when the turn makes it, and the prompt's new tokens
        cpu = time.thread_time()
        stamp("eval_start", n_past=llm.n_tokens)
        evaluate(tokens)
        spent = time.thread_time() - cpu
        with _lock:
            if _current and "sample_start" not in _current["stamps"]:
                _current["stamps"]["eval_end"] = now()
                info = _current["info"]
                info["eval_tokens"] = info.get("eval_tokens", 0) + len(tokens)
                info["eval_cpu"] = info.get("eval_cpu", 0.0) + spent

    def sample_(*args, **kwargs):
        stamp("sample_start")
        token = sample(*args, **kwargs)
        stamp("sample_end")
        return token

    llm.create_chat_completion, llm.tokenize, llm.eval, llm.sample = create_chat_completion, tokenize_, eval_, sample_
    return llm


model.ChatModel._open = open_model

original_say = agent_kit.Turn.say


async def say(self, text):
    stamp("say")
    return await original_say(self, text)


agent_kit.Turn.say = say

original_send = agent_kit.Connection.send


def send(self, message):
    original_send(self, message)
    update = (message.get("params") or {}).get("update") or {}
    if update.get("sessionUpdate") == "agent_message_chunk":
        with _lock:
            if not _current or "written" in _current["stamps"]:
                return
            _current["stamps"]["written"] = now()
            if _current.pop("first", False):
                for name, value in _boot.items():
                    _current["stamps"].setdefault(name, value)
                _current["info"].update(_boot_info, process_cpu=time.process_time())
            line = json.dumps(_current)
        with TRACE.open("a", encoding="utf-8") as f:
            f.write(line + "\n")


agent_kit.Connection.send = send

if __name__ == "__main__":
    options = sys.argv[2:]
    if "--no-ahead" in options:
        options.remove("--no-ahead")
        local_model.LocalModelAgent._prepare_next = lambda self, session: None  # type: ignore[method-assign]
    if "--as-before" in options:
        options.remove("--as-before")
        import acp

        for name in acp.__all__:  # the client's modules, as the package imported them then
            getattr(acp, name)
        model.ChatModel.start_loading = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
        model.read_keyed = lambda path, key=None: None  # type: ignore[assignment]
    boot("agent_ready")
    local_model.main(options)
