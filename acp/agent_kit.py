"""A tiny toolkit for writing the AGENT side of ACP in Python.

It speaks newline-delimited JSON-RPC over this process's stdin/stdout (same
framing as our client) and turns the protocol into a handful of methods to
override. Used by the scripted test agents and by the shipped local-model
agent.

Writing an agent::

    from acp.agent_kit import AgentBase, Turn, run

    class Echo(AgentBase):
        name = "echo"
        version = "1.0"
        load_session = False          # True: also override load()

        async def prompt(self, turn: Turn) -> str:
            await turn.thought("reading the prompt")
            for word in turn.text.split():
                if turn.cancelled:    # session/cancel arrived
                    return "cancelled"
                await turn.say(word + " ")
            choice = await turn.request_permission(
                {"toolCallId": "t1", "title": "Write a file", "kind": "edit"},
                [{"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
                 {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}])
            # choice is the chosen optionId, or None when the client cancelled
            return "end_turn"         # the stopReason

    if __name__ == "__main__":
        run(Echo())

Rules the kit takes care of:

* stdout carries only protocol lines. `run()` moves the real stdout to a
  private descriptor and points fd 1 (and `sys.stdout`) at stderr, so stray
  prints and native libraries that write to stdout cannot corrupt the stream.
* Requests are handled as concurrent tasks, notifications inline in arrival
  order, so a prompt that awaits a permission reply still sees session/cancel.
* session/cancel sets `turn.cancelled` and cancels the prompt task (it gets
  `asyncio.CancelledError` at its next await; catch it for cleanup if needed);
  the kit then answers the prompt with stopReason "cancelled". Blocking work
  run through `asyncio.to_thread` should poll `turn.cancelled` to stop early.
* Exceptions in a handler become JSON-RPC errors (`RpcFailure` lets you pick
  the code, e.g. AUTH_REQUIRED); the agent keeps running.
* `$/cancel_request` {requestId} from the client cancels that request's handler
  task, which is answered with error -32800; `Connection.cancel_request(id)`
  withdraws one of ours (see `Connection.start_request`).
* The agent exits when stdin closes.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import traceback
import uuid
from typing import Any

from . import framing

__all__ = ["AgentBase", "Turn", "Connection", "RpcFailure", "RemoteError", "run"]


class RpcFailure(Exception):
    """Raise from a handler to answer with a specific JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class RemoteError(Exception):
    """The client answered one of our requests with an error."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(f"{message} ({code})")
        self.code, self.message, self.data = code, message, data


class Connection:
    """Agent-side JSON-RPC endpoint over raw file descriptors."""

    def __init__(self, agent: AgentBase, in_fd: int, out_fd: int):
        self._agent = agent
        self._in_fd, self._out_fd = in_fd, out_fd
        self._ids = itertools.count(1)
        self._pending: dict[Any, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self._answering: dict[Any, asyncio.Task] = {}
        self._withdrawn: set[asyncio.Task] = set()  # cancelled by the client's $/cancel_request
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed: asyncio.Event | None = None
        self._inbox: asyncio.Queue | None = None

    # -- sending -----------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        # os.write may take a big line in several pieces, see send_raw.
        self.send_raw(framing.encode(message))

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (tests use it to send garbage lines)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self._out_fd, view) :]

    def notify(self, method: str, params: Any = None) -> None:
        self.send(framing.notification(method, params))

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request to the client and wait for its result."""
        request_id, future = self.start_request(method, params)
        try:
            return await future
        finally:
            self._pending.pop(request_id, None)

    def start_request(self, method: str, params: Any = None) -> tuple[int, asyncio.Future]:
        """Send a request; its id and the future of its result (RemoteError on an error)."""
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self.send(framing.request(request_id, method, params))
        return request_id, future

    def cancel_request(self, request_id: Any) -> None:
        """Withdraw a request of ours: `$/cancel_request` (its reply still comes)."""
        self.notify("$/cancel_request", {"requestId": request_id})

    # -- receiving ---------------------------------------------------------
    def _reader_thread(self) -> None:
        # A thread with os.read works for any kind of stdin (pipe, file, tty),
        # unlike loop.connect_read_pipe.
        assert self._loop is not None and self._inbox is not None
        while True:
            try:
                data = os.read(self._in_fd, 1 << 16)
            except OSError:
                data = b""
            try:
                self._loop.call_soon_threadsafe(self._inbox.put_nowait, data)
            except RuntimeError:  # loop already closed
                return
            if not data:
                return

    async def serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._inbox = asyncio.Queue()
        threading.Thread(target=self._reader_thread, daemon=True).start()
        buffer = framing.LineBuffer()
        while True:
            data = await self._inbox.get()
            if not data:
                break
            for message in framing.iter_messages(buffer, data):
                await self._dispatch(message)
        for task in list(self._tasks):
            task.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(EOFError("stdin closed"))

    async def _dispatch(self, message: dict | framing.ParseError) -> None:
        if isinstance(message, framing.ParseError):
            print(f"agent_kit: ignoring {message}", file=sys.stderr)
            self.send(framing.error(None, framing.PARSE_ERROR, "Parse error"))
            return
        self._agent.received(message)
        kind = framing.classify(message)
        if kind == framing.RESPONSE:
            future = self._pending.get(message.get("id"))
            if future is not None and not future.done():
                if "error" in message:
                    err = message["error"] or {}
                    future.set_exception(RemoteError(err.get("code", 0), err.get("message", ""), err.get("data")))
                else:
                    future.set_result(message.get("result"))
        elif kind == framing.NOTIFICATION:
            if message["method"] == "$/cancel_request":
                params = message.get("params")
                task = self._answering.get(params.get("requestId") if isinstance(params, dict) else None)
                if task is not None and not task.done():
                    self._withdrawn.add(task)
                    task.cancel()
                return
            try:
                await self._agent._handle_notification(message["method"], message.get("params") or {})
            except Exception:
                traceback.print_exc(file=sys.stderr)
        elif kind == framing.REQUEST:
            task = asyncio.create_task(self._answer(message))
            self._tasks.add(task)
            request_id = message["id"]
            self._answering[request_id] = task

            def done(task: asyncio.Task, request_id=request_id) -> None:
                self._tasks.discard(task)
                self._withdrawn.discard(task)
                if self._answering.get(request_id) is task:
                    del self._answering[request_id]

            task.add_done_callback(done)
        else:
            self.send(framing.error(message.get("id"), framing.INVALID_REQUEST, "Invalid request"))

    async def _answer(self, message: dict[str, Any]) -> None:
        request_id = message["id"]
        try:
            value = await self._agent._handle_request(message["method"], message.get("params") or {})
        except RpcFailure as exc:
            self.send(framing.error(request_id, exc.code, exc.message, exc.data))
        except asyncio.CancelledError:
            if asyncio.current_task() not in self._withdrawn:
                raise
            self.send(framing.error(request_id, -32800, "Request cancelled"))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.send(framing.error(request_id, framing.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
        else:
            self.send(framing.result(request_id, value))


class Turn:
    """One session/prompt being answered: the prompt plus ways to reply."""

    def __init__(self, agent: AgentBase, session_id: str, prompt: list[dict]):
        self.agent = agent
        self.session_id = session_id
        self.prompt = prompt
        # The plain text of the prompt: text blocks joined; others ignored.
        self.text = "".join(b.get("text", "") for b in prompt if b.get("type") == "text")
        self.cancelled = False

    async def update(self, update: dict[str, Any]) -> None:
        """Send one raw session/update for this session."""
        self.agent.send_update(self.session_id, update)
        await asyncio.sleep(0)  # let cancellation and incoming messages in

    async def say(self, text: str) -> None:
        await self.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})

    async def thought(self, text: str) -> None:
        await self.update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": text}})

    async def tool_call(
        self, tool_call_id: str, title: str, kind: str = "other", status: str = "pending", **fields: Any
    ) -> None:
        await self.update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": tool_call_id,
                "title": title,
                "kind": kind,
                "status": status,
                **fields,
            }
        )

    async def tool_call_update(self, tool_call_id: str, **fields: Any) -> None:
        await self.update({"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, **fields})

    async def plan(self, entries: list[dict[str, Any]]) -> None:
        """entries: [{"content": str, "priority": "high|medium|low", "status": "pending|in_progress|completed"}]"""
        await self.update({"sessionUpdate": "plan", "entries": entries})

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        """elicitation/create in form mode; the client's reply ({action, content})."""
        return await self.agent.conn.request(
            "elicitation/create",
            {"sessionId": self.session_id, "mode": "form", "message": message, "requestedSchema": schema},
        )

    async def elicit_url(self, message: str, url: str, elicitation_id: str) -> dict[str, Any]:
        """elicitation/create in URL mode; the client's reply ({action})."""
        return await self.agent.conn.request(
            "elicitation/create",
            {
                "sessionId": self.session_id,
                "mode": "url",
                "message": message,
                "url": url,
                "elicitationId": elicitation_id,
            },
        )

    async def request_permission(self, tool_call: dict[str, Any], options: list[dict[str, Any]]) -> str | None:
        """Ask the client; returns the chosen optionId, or None if cancelled."""
        reply = await self.agent.conn.request(
            "session/request_permission", {"sessionId": self.session_id, "toolCall": tool_call, "options": options}
        )
        outcome = (reply or {}).get("outcome") or {}
        if outcome.get("outcome") == "selected":
            return outcome.get("optionId")
        return None


class AgentBase:
    """Override the hooks you need; the defaults make a minimal valid agent."""

    name = "agent"
    version = "0.0.0"
    title: str | None = None
    protocol_version = 1
    load_session = False
    prompt_capabilities: dict[str, Any] = {}
    auth_methods: list[dict[str, Any]] = []  # [{"id", "name", "description"}]

    def __init__(self) -> None:
        self.conn: Connection = None  # type: ignore[assignment]  # set by run()
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self._turns: dict[str, tuple[Turn, asyncio.Task]] = {}

    # -- helpers -------------------------------------------------------------
    def send_update(self, session_id: str, update: dict[str, Any]) -> None:
        self.conn.notify("session/update", {"sessionId": session_id, "update": update})

    def send_commands(self, session_id: str, commands: list[dict[str, Any]]) -> None:
        """commands: [{"name", "description", "input": {"hint"} or None}]"""
        self.send_update(session_id, {"sessionUpdate": "available_commands_update", "availableCommands": commands})

    # -- hooks ---------------------------------------------------------------
    def received(self, message: dict[str, Any]) -> None:
        """Sees every incoming message first, before it is handled (for logs)."""

    async def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        info = {"name": self.name, "version": self.version}
        if self.title:
            info["title"] = self.title
        return {
            "protocolVersion": self.protocol_version,
            "agentCapabilities": {
                "loadSession": self.load_session,
                "promptCapabilities": dict(self.prompt_capabilities),
            },
            "authMethods": list(self.auth_methods),
            "agentInfo": info,
        }

    async def authenticate(self, method_id: str) -> None:
        raise RpcFailure(framing.METHOD_NOT_FOUND, "authentication not supported")

    async def new_session(self, cwd: str, params: dict[str, Any]) -> str:
        """Return the new session id. May call self.send_commands(id, ...)
        first: ACP allows available_commands_update before the reply."""
        return "sess_" + uuid.uuid4().hex[:16]

    async def load(self, session_id: str, cwd: str, params: dict[str, Any]) -> None:
        """session/load (only if load_session = True): replay the session's
        history as user_message_chunk / agent_message_chunk updates, then return."""
        raise RpcFailure(framing.METHOD_NOT_FOUND, "session/load not supported")

    async def prompt(self, turn: Turn) -> str:
        """Answer one prompt; return the stopReason."""
        return "end_turn"

    async def cancel(self, session_id: str) -> None:
        """Called on session/cancel after the running turn was marked cancelled."""

    async def other_request(self, method: str, params: dict[str, Any]) -> Any:
        raise RpcFailure(framing.METHOD_NOT_FOUND, f"method not found: {method}")

    async def other_notification(self, method: str, params: dict[str, Any]) -> None:
        pass

    # -- dispatch (used by Connection) ----------------------------------------
    async def _handle_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "initialize":
            self.client_info = params.get("clientInfo") or {}
            self.client_capabilities = params.get("clientCapabilities") or {}
            return await self.initialize(params)
        if method == "authenticate":
            await self.authenticate(params.get("methodId", ""))
            return {}
        if method == "session/new":
            return {"sessionId": await self.new_session(params.get("cwd", ""), params)}
        if method == "session/load":
            await self.load(params.get("sessionId", ""), params.get("cwd", ""), params)
            return None
        if method == "session/prompt":
            return await self._run_prompt(params)
        return await self.other_request(method, params)

    async def _run_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        turn = Turn(self, params.get("sessionId", ""), params.get("prompt") or [])
        task = asyncio.create_task(self.prompt(turn))
        self._turns[turn.session_id] = (turn, task)
        try:
            stop_reason = await task
        except asyncio.CancelledError:
            if not turn.cancelled:  # we ourselves are being torn down
                raise
            stop_reason = "cancelled"
        finally:
            if self._turns.get(turn.session_id, (None,))[0] is turn:
                del self._turns[turn.session_id]
        return {"stopReason": "cancelled" if turn.cancelled else (stop_reason or "end_turn")}

    async def _handle_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "session/cancel":
            session_id = params.get("sessionId", "")
            running = self._turns.get(session_id)
            if running:
                running[0].cancelled = True
                running[1].cancel()
            await self.cancel(session_id)
        else:
            await self.other_notification(method, params)


def run(agent: AgentBase) -> None:
    """Serve the agent over stdin/stdout until stdin closes."""
    out_fd = os.dup(1)
    os.dup2(2, 1)  # anything else written to fd 1 now lands on stderr
    sys.stdout = sys.stderr
    agent.conn = Connection(agent, 0, out_fd)
    try:
        asyncio.run(agent.conn.serve())
    except KeyboardInterrupt:
        pass
