"""The ACP client: one running agent process and its sessions.

`start_agent()` spawns the process and runs `initialize`; the returned Agent
opens/loads sessions and runs prompts, turning session/update notifications
into `Update` objects, and session/request_permission and elicitation/create
into callbacks.

Each session's modes, config options, models, usage and title are kept in a
`SessionState` (acp/session_state.py), from the session/new and session/load
results and from the updates, whenever they come: before session/new returns,
between prompts, during one. `set_mode`, `set_model`, `set_config_option` and
`apply_choices` change them; `on_state` hears of every change.

Sessions are managed with what the agent announces in `agentCapabilities.sessionCapabilities`
(`session_capabilities`): `list_sessions` (session/list), `resume_session` (session/resume:
no replay), `fork_session` (session/fork, unstable in ACP), `close_session` (session/close),
`delete_session` (session/delete).

The agent's questions (permissions, elicitations) are bounded per session
(MAX_QUESTIONS): one more is refused at once and the turn is told in one line.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

from . import framing, remote
from .elicitation import (
    ACCEPT,
    CANCEL,
    DECLINE,
    BadElicitation,
    ElicitationAnswer,
    ElicitationRequest,
    links_in,
    parse_request,
    safe_link,
)
from .errors import (
    AcpError,
    AgentCrashed,
    AgentStartError,
    AgentStopped,
    AgentTimeout,
    AuthRequired,
    ConnectionLost,
    RpcError,
    last_line,
)
from .process import AgentProcess
from .rpc import Peer
from .sandbox import Sandbox
from .session_state import MODE, MODEL, ChoiceError, Choices, Selector, SessionState, Skipped, plan_choices, resolve
from .updates import Update, normalise_commands, normalise_update

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
try:
    CLIENT_VERSION = metadata.version("sidekicks-matrix")
except metadata.PackageNotFoundError:  # running from a plain checkout
    CLIENT_VERSION = "0.1.0"

DEFAULT_CLIENT_CAPABILITIES = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
# What a client that shows coding agents' work announces (the bridge passes it to the Pool):
# elicitation in both modes (unstable in ACP), and the terminal-output extension of
# codex-acp / claude-code-acp (`_meta.terminal_output`: output streamed in tool-call updates).
CODING_CLIENT_CAPABILITIES = {
    **DEFAULT_CLIENT_CAPABILITIES,
    "elicitation": {"form": {}, "url": {}},
    "session": {"configOptions": {"boolean": {}}},  # `!config NAME on|off` (coding/settings.py)
    "_meta": {"terminal_output": True},
    # terminal logins are offered (the bridge tells the owner the command: docs/sessions.md "Logins")
    "auth": {"terminal": True},
}
CANCEL_GRACE = 3.0  # after a silence timeout: how long a cancelled prompt may take to return
MAX_QUESTIONS = 16  # permission + elicitation requests open at once in one session
URL_ELICITATIONS_KEPT = 64  # URL elicitations waiting for elicitation/complete, per agent
LOGIN_ASKS = 4  # pages an agent may ask the person to open during one login
LOGIN_WAIT = 1800.0  # seconds one `authenticate` may run (a person is logging in)
MAX_LISTED = 200  # sessions list_sessions() reads at most (pages of session/list)
MAX_LIST_PAGES = 10
MAX_EARLY_STATES = 8  # states kept for session ids not (yet) ours: updates before session/new returns
ELICITATION_ON_CANCEL = DECLINE  # a stopped turn declines what its agent asked (`!stop` declines)


@dataclass
class AgentSpec:
    name: str
    command: list[str]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    title: str = ""
    timeout: float = 300.0  # silence limit during a call, seconds
    # the bubblewrap sandbox it runs in (acp/sandbox.py; the bridge gives every agent one unless
    # its config says `sandbox: off` or it runs over ssh); None: a plain child process
    sandbox: Sandbox | None = None


@dataclass(frozen=True)
class SessionCapabilities:
    """What `agentCapabilities.sessionCapabilities` announces (ACP: an object, `{}` or more,
    means supported; omitted or null means not)."""

    list: bool = False
    resume: bool = False
    fork: bool = False
    close: bool = False
    delete: bool = False

    @classmethod
    def from_capabilities(cls, caps: Any) -> SessionCapabilities:
        found = caps.get("sessionCapabilities") if isinstance(caps, dict) else None
        if not isinstance(found, dict):
            return cls()
        return cls(
            **{name: isinstance(found.get(name), dict) for name in ("list", "resume", "fork", "close", "delete")}
        )


@dataclass(frozen=True)
class SessionInfo:
    """One session as session/list tells it."""

    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = None  # ISO 8601, as the agent wrote it


@dataclass
class PermissionRequest:
    session_id: str
    tool_call: dict[str, Any]
    options: list[dict[str, Any]]  # as sent: {optionId, name, kind}


OnUpdate = Callable[[Update], Any]
OnPermission = Callable[[PermissionRequest], Awaitable[str | None]]
OnElicitation = Callable[[ElicitationRequest], Awaitable[ElicitationAnswer | None]]
OnCommands = Callable[[str, list[dict[str, Any]]], Any]
# what an agent asks while it logs in: (the link and its host as safe_link offers them, or None
# for a link not shown; what it says about it)
OnLoginAsk = Callable[[tuple[str, str] | None, str], Any]
# (agent name, session id, the update, the session's state after it)
OnState = Callable[[str, str, Update, SessionState], Any]


@dataclass(frozen=True)
class Applied:
    """What apply_choices() did: the calls made, and the choices it could not apply."""

    done: list[tuple[str, str, str]]  # (kind, key, value)
    failed: list[Skipped]


async def _call(callback: Callable[..., Any] | None, *args: Any) -> Any:
    """Call a callback that may be sync or async."""
    if callback is None:
        return None
    outcome = callback(*args)
    return await outcome if inspect.isawaitable(outcome) else outcome


class _LoadSession:
    """`agent.load_session` is both the capability and the method.

    The public API names both the loadSession capability (a bool) and the
    session/load call `load_session`, so this object is truthy exactly when
    the agent announced loadSession and calling it loads a session.
    """

    def __init__(self, agent: Agent):
        self._agent = agent

    def __bool__(self) -> bool:
        return self._agent.supports_load_session

    def __call__(
        self, session_id: str, cwd: str | None = None, mcp_servers: list[dict[str, Any]] | None = None
    ) -> Awaitable[None]:
        return self._agent._load_session(session_id, cwd, mcp_servers)

    def __repr__(self) -> str:
        return repr(bool(self))


@dataclass
class _Prompt:
    on_update: OnUpdate
    on_permission: OnPermission | None
    on_elicitation: OnElicitation | None = None
    sent: bool = False  # session/prompt is written: updates from now on are this turn's
    cancelled: bool = False  # session/cancel went out: new permission questions are cancelled


class _Login:
    """An `authenticate` running, and what its agent asks meanwhile (Agent.authenticate)."""

    def __init__(self, call: asyncio.Future, on_ask: OnLoginAsk | None):
        self.call, self.on_ask = call, on_ask
        self.asked: list[str] = []
        self._line = bytearray()  # stderr after its last newline

    def ask(self, url: str, message: str) -> None:
        if url in self.asked or len(self.asked) >= LOGIN_ASKS or self.on_ask is None:
            return
        self.asked.append(url)
        try:
            self.on_ask(safe_link(url), message)
        except Exception:
            log.exception("on_ask failed")

    def elicitation(self, params: dict[str, Any]) -> dict[str, Any]:
        """A request-scoped elicitation during the login: a page to open is passed on and
        accepted; a form is declined (a login's secrets never go through a form: the RFD)."""
        try:
            request = parse_request(params)
        except BadElicitation as exc:
            raise RpcError(framing.INVALID_PARAMS, f"cannot ask this: {exc}") from None
        if request.mode != "url":
            return {"action": DECLINE}
        self.ask(request.url, request.message)
        return {"action": ACCEPT}

    def stderr(self, chunk: bytes) -> None:
        """The agent's stderr, as it comes: each whole line's links, the line beside them."""
        self._line += chunk
        *lines, rest = bytes(self._line).split(b"\n")
        self._line = bytearray(rest[-4096:])
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            for link in links_in(line):
                self.ask(link, line.replace(link, " ").strip(" :"))


class Agent:
    def __init__(
        self,
        spec: AgentSpec,
        process: AgentProcess,
        on_commands: OnCommands | None = None,
        on_state: OnState | None = None,
    ):
        self.spec = spec
        self.process = process
        self.on_commands = on_commands
        self.on_state = on_state
        self.on_exit: Callable[[Agent], Any] | None = None  # set by the Pool
        self.info: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}  # agentCapabilities._meta
        self.steers = False  # `_session/steering` offered (initialize's `_meta.steering.supported`)
        self.protocol_version = 0
        self.supports_load_session = False
        self.load_session = _LoadSession(self)
        self.prompt_capabilities: dict[str, Any] = {}
        self.mcp_capabilities: dict[str, Any] = {}  # agentCapabilities.mcpCapabilities: http, sse
        self.takes_directories = False  # sessionCapabilities.additionalDirectories announced
        self.session_capabilities = SessionCapabilities()  # list, resume, fork, close
        self.auth_methods: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] | None = None
        self.sessions: set[str] = set()
        self._prompts: dict[str, _Prompt] = {}
        self._loading: set[str] = set()
        self._states: dict[str, SessionState] = {}
        # the agent's questions waiting for a person, per session: waiter -> the reply's task
        self._permissions: dict[str, dict[asyncio.Future, asyncio.Task]] = {}
        self._asking = 0  # questions waiting for a person: not silence
        self.refused_questions = 0  # questions refused past MAX_QUESTIONS
        # URL elicitations that may still be completed (elicitation/complete), oldest first
        self._url_elicitations: dict[str, asyncio.Event] = {}
        self._login: _Login | None = None  # the `authenticate` running, if any
        self._stopping = False
        self.peer = Peer(
            process.stdout,
            process.stdin,
            on_request=self._on_request,
            on_notification=self._on_notification,
            label=spec.name,
        )
        self._watch = asyncio.create_task(self._watch_exit(), name=f"acp-watch-{spec.name}")

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def remote(self) -> bool:
        """It runs on another host over ssh (acp/remote.py)."""
        return remote.is_remote(self.spec.command)

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def stderr_tail(self) -> str:
        return self.process.stderr_tail()

    @property
    def asking(self) -> bool:
        """A question of the agent's (permission, elicitation) waits for a person."""
        return self._asking > 0

    # -- lifecycle ---------------------------------------------------------------
    async def _watch_exit(self) -> None:
        await self.process.wait()
        # Let the reader drain what the agent wrote before exiting; a grandchild
        # still holding stdout open must not keep calls hanging, hence the bound.
        await asyncio.wait({asyncio.ensure_future(self.peer.closed.wait())}, timeout=1.0)
        await self.peer.close()
        if self.on_exit is not None:
            try:
                await _call(self.on_exit, self)
            except Exception:
                log.exception("%s: on_exit callback failed", self.name)

    async def stop(self, stdin_grace: float = 1.0) -> None:
        """Close stdin, SIGTERM, SIGKILL after a grace (see AgentProcess.stop)."""
        self._stopping = True
        await self.process.stop(stdin_grace=stdin_grace)
        await self.peer.close()
        await asyncio.wait({self._watch}, timeout=2.0)

    async def _lost(self) -> AcpError:
        """The error for a call cut short because the process went away."""
        code = await self.process.wait(2.0)
        if code is None:  # stdout closed but still alive: unusable, end it
            await self.process.stop(stdin_grace=0.1)
            code = self.process.returncode
        tail = await self.process.stderr_settled()
        cls = AgentStopped if self._stopping else AgentCrashed
        return cls(self.name, code, tail, remote.destination(self.spec.command) if self.remote else None)

    async def _call(
        self,
        method: str,
        params: dict[str, Any],
        session_id: str | None = None,
        on_sent: Callable[[], None] | None = None,
        before_send: Callable[[], Awaitable[None]] | None = None,
        on_written: Callable[[], None] | None = None,
    ) -> Any:
        """A request bounded by the silence limit; crash/timeout mapped to our errors."""
        call = asyncio.ensure_future(self.peer.request(method, params, on_sent, before_send, on_written))
        try:
            await self._wait_alive(call, session_id)
            return call.result()
        except ConnectionLost:
            raise await self._lost() from None
        finally:
            if not call.done():
                call.cancel()
            elif not call.cancelled():
                call.exception()  # mark as retrieved: no "never retrieved" noise

    async def _wait_alive(self, call: asyncio.Future, session_id: str | None) -> None:
        limit = self.spec.timeout
        started = time.monotonic()  # an agent idle before the call is not silent
        while True:
            idle = time.monotonic() - max(self.peer.last_activity, started)
            if self._asking:
                idle = 0.0  # a person is deciding; the agent is rightly quiet
            if idle >= limit:
                break
            done, _ = await asyncio.wait({call}, timeout=limit - idle)
            if done:
                call.result()  # raises the RpcError / ConnectionLost
                return
        # Silent too long: ask politely, then end the process.
        if session_id is not None:
            await self.cancel(session_id)
            done, _ = await asyncio.wait({call}, timeout=min(CANCEL_GRACE, limit))
            if done and not isinstance(call.exception(), ConnectionLost):
                raise AgentTimeout(self.name, limit, killed=False)
        await self.stop(stdin_grace=0.2)  # it ignored the cancel: no point waiting long
        raise AgentTimeout(self.name, limit, killed=True)

    # -- protocol calls -------------------------------------------------------------
    async def _initialize(self, client_capabilities: dict[str, Any] | None) -> None:
        result = (
            await self._call(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": client_capabilities
                    if client_capabilities is not None
                    else DEFAULT_CLIENT_CAPABILITIES,
                    "clientInfo": {"name": "sidekicks-matrix", "version": CLIENT_VERSION},
                },
            )
            or {}
        )
        self.protocol_version = int(result.get("protocolVersion") or 0)
        caps = result.get("agentCapabilities") or {}
        self.agent_capabilities = dict(caps) if isinstance(caps, dict) else {}  # as announced (`check`)
        self.supports_load_session = bool(caps.get("loadSession"))
        self.prompt_capabilities = dict(caps.get("promptCapabilities") or {})
        mcp = caps.get("mcpCapabilities")
        self.mcp_capabilities = dict(mcp) if isinstance(mcp, dict) else {}
        self.session_capabilities = SessionCapabilities.from_capabilities(caps)
        self.auth_methods = list(result.get("authMethods") or [])
        # sessionCapabilities.additionalDirectories: session/new takes roots beside its cwd
        sessions = caps.get("sessionCapabilities")
        self.takes_directories = isinstance(sessions, dict) and isinstance(sessions.get("additionalDirectories"), dict)
        self.info = dict(result.get("agentInfo") or {})
        # custom capabilities an agent announces (ACP's `_meta`), e.g. `_sidekicks/prepare`
        meta = caps.get("_meta")
        self.meta = dict(meta) if isinstance(meta, dict) else {}
        # steering inside a running turn (`_session/steering`, the Claude Code and Codex
        # adapters' extension): announced as `_meta.steering.supported` in the answer
        self.steers = any(
            isinstance(m, dict) and isinstance(m.get("steering"), dict) and m["steering"].get("supported") is True
            for m in (result.get("_meta"), meta)
        )

    def working_dir(self, cwd: str | None = None) -> str:
        """The absolute working directory a session opened with `cwd` gets (the configured
        one by default, else the bridge's own)."""
        return os.path.abspath(os.path.expanduser(cwd or self.spec.cwd or os.getcwd()))

    def _auth_error(self, exc: RpcError) -> AcpError:
        if exc.code == framing.AUTH_REQUIRED or (self.auth_methods and "auth" in exc.message.lower()):
            return AuthRequired(self.name, self.auth_methods)
        return exc

    async def new_session(
        self,
        cwd: str | None = None,
        mcp_servers: list[dict[str, Any]] | None = None,
        additional_directories: list[str] | None = None,
    ) -> str:
        return (await self.open_session(cwd, mcp_servers, additional_directories))["sessionId"]

    async def open_session(
        self,
        cwd: str | None = None,
        mcp_servers: list[dict[str, Any]] | None = None,
        additional_directories: list[str] | None = None,
    ) -> dict[str, Any]:
        """session/new: the whole result (its modes, config options and models besides the
        session id, for `sidekicks check`); the session is kept as new_session() keeps it.
        `mcp_servers`: ACP McpServer entries the session gets (the bridge's `matrix` server);
        `additional_directories`: roots beside `cwd`, sent only to an agent that announces it
        takes them."""
        params: dict[str, Any] = {"cwd": self.working_dir(cwd), "mcpServers": list(mcp_servers or [])}
        if additional_directories and self.takes_directories:
            params["additionalDirectories"] = [os.path.abspath(d) for d in additional_directories]
        try:
            result = await self._call("session/new", params)
        except RpcError as exc:
            raise self._auth_error(exc) from None
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise AcpError(f"{self.name}: session/new returned no session id")
        self.sessions.add(session_id)
        self.state(session_id).apply_result(result)  # updates sent before it are kept
        return result

    async def _load_session(
        self, session_id: str, cwd: str | None = None, mcp_servers: list[dict[str, Any]] | None = None
    ) -> None:
        if not self.supports_load_session:
            raise AcpError(f"{self.name} cannot load sessions (no loadSession capability)")
        self._loading.add(session_id)  # its replayed history is not for us
        try:
            await self._with_session("session/load", session_id, cwd, mcp_servers)
        finally:
            self._loading.discard(session_id)

    async def _with_session(
        self, method: str, session_id: str, cwd: str | None, mcp_servers: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """session/load, /resume or /fork of `session_id`: the session they give is ours from
        now on (the one asked for; for a fork, the new one), its state from the result."""
        try:
            result = await self._call(
                method, {"sessionId": session_id, "cwd": self.working_dir(cwd), "mcpServers": list(mcp_servers or [])}
            )
        except RpcError as exc:
            raise self._auth_error(exc) from None
        result = result if isinstance(result, dict) else {}
        given = result.get("sessionId") if method == "session/fork" else session_id
        if not isinstance(given, str) or not given:
            raise AcpError(f"{self.name}: {method} returned no session id")
        self.sessions.add(given)
        self.state(given).apply_result(result)
        return result

    def _need(self, capability: str, method: str) -> None:
        if not getattr(self.session_capabilities, capability):
            raise AcpError(f"{self.name} cannot {capability} sessions (no {method})")

    async def list_sessions(self, cwd: str | None = None) -> list[SessionInfo]:
        """session/list, every page (at most MAX_LIST_PAGES, MAX_LISTED sessions), for the
        working directory `cwd` would give (the agent filters by it). Entries that are not
        sessions are left out (an agent's output is not trusted)."""
        self._need("list", "session/list")
        found: list[SessionInfo] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params: dict[str, Any] = {"cwd": self.working_dir(cwd)}
            if cursor:
                params["cursor"] = cursor
            try:
                result = await self._call("session/list", params)
            except RpcError as exc:
                raise AcpError(f"{self.name} could not list its sessions: {exc.message}") from None
            result = result if isinstance(result, dict) else {}
            for entry in result.get("sessions") or []:
                info = _session_info(entry)
                if info is not None and len(found) < MAX_LISTED:
                    found.append(info)
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor or len(found) >= MAX_LISTED:
                break
        return found

    async def resume_session(
        self, session_id: str, cwd: str | None = None, mcp_servers: list[dict[str, Any]] | None = None
    ) -> None:
        """session/resume: the session goes on, its history is not replayed."""
        self._need("resume", "session/resume")
        await self._with_session("session/resume", session_id, cwd, mcp_servers)

    async def fork_session(
        self, session_id: str, cwd: str | None = None, mcp_servers: list[dict[str, Any]] | None = None
    ) -> str:
        """session/fork (unstable in ACP): a new session with a copy of this one's history;
        its id."""
        self._need("fork", "session/fork")
        return (await self._with_session("session/fork", session_id, cwd, mcp_servers))["sessionId"]

    async def delete_session(self, session_id: str) -> None:
        """session/delete where the agent announces it: the session is gone from its list."""
        self._need("delete", "session/delete")
        try:
            await self._call("session/delete", {"sessionId": session_id})
        except RpcError as exc:
            raise AcpError(f"{self.name} could not delete session {session_id}: {exc.message}") from None
        self.sessions.discard(session_id)
        self._states.pop(session_id, None)

    async def close_session(self, session_id: str) -> bool:
        """session/close where the agent announces it: it frees the session. False when it
        does not (then nothing is sent); the session is no longer ours either way."""
        self.sessions.discard(session_id)
        self._states.pop(session_id, None)
        if not self.session_capabilities.close:
            return False
        try:
            await self._call("session/close", {"sessionId": session_id})
        except RpcError as exc:
            raise AcpError(f"{self.name} could not close session {session_id}: {exc.message}") from None
        return True

    async def prompt(
        self,
        session_id: str,
        text: str | list[dict[str, Any]],
        on_update: OnUpdate,
        on_permission: OnPermission | None = None,
        on_elicitation: OnElicitation | None = None,
        before_send: Callable[[], Awaitable[None]] | None = None,
        on_written: Callable[[], None] | None = None,
    ) -> str:
        """Send one prompt: a text, or a list of ACP content blocks (text, image, audio,
        resource, resource_link: what the agent's promptCapabilities allow; the caller
        checks). Returns the stopReason once the agent is done. `before_send` is awaited just
        before (rpc.Peer.request): the prompt is written the moment it returns. `on_written` runs
        (synchronously) once the whole prompt is in the agent's stdin: a kill of the bridge from
        then on leaves it for the agent to read."""
        if session_id in self._prompts:
            raise AcpError(f"{self.name}: a prompt is already running in session {session_id}")
        running = self._prompts[session_id] = _Prompt(on_update, on_permission, on_elicitation)

        def sent() -> None:  # what the agent sends after reading it is this prompt's
            running.sent = True

        try:
            result = await self._call(
                "session/prompt",
                {"sessionId": session_id, "prompt": prompt_blocks(text)},
                session_id,
                on_sent=sent,
                before_send=before_send,
                on_written=on_written,
            )
        finally:
            self._prompts.pop(session_id, None)
        return str((result or {}).get("stopReason") or "end_turn")

    async def extension(self, method: str, params: dict[str, Any]) -> Any:
        """An ACP extension request (its name starts with `_`), answered at once by an agent
        that announced it (docs/prepare.md)."""
        return await self._call(method, params)

    async def authenticate(self, method_id: str, on_ask: OnLoginAsk | None = None, wait: float = LOGIN_WAIT) -> None:
        """`authenticate` with an `agent` method: the agent logs in itself (docs/sessions.md
        "Logins"). What it asks the person meanwhile goes to `on_ask`: a URL elicitation scoped to
        a request (`requestId`, no session: the ACP elicitation RFD's way during a login), answered
        `accept` once passed on, and the links on the lines of its stderr (where a login prints
        the page to open when no browser opens); LOGIN_ASKS at most, each once. The call is bound
        by `wait` seconds, not by the silence limit (the agent waits for a person), then withdrawn
        (`$/cancel_request`) with AgentTimeout. A second call while one runs waits for that one."""
        joined = self._login is not None
        if self._login is not None:
            call = self._login.call
        else:
            call = asyncio.ensure_future(self.peer.request("authenticate", {"methodId": method_id}))
            self._login = _Login(call, on_ask)
            self.process.on_stderr = self._login.stderr
        try:
            await asyncio.wait({call}, timeout=wait)
            if not call.done() or call.cancelled():
                raise AgentTimeout(self.name, wait, killed=False)
            call.result()  # the agent's refusal, if any
        except ConnectionLost:
            raise await self._lost() from None
        finally:
            if not joined:
                self._login, self.process.on_stderr = None, None
                if not call.done():
                    call.cancel()  # the peer is told (`$/cancel_request`)

    async def steer(self, session_id: str, text: str) -> str:
        """`_session/steering`: `text` goes into the session's running turn (docs/sessions.md
        "Steering inside the turn"). The outcome: "injected" (the running turn goes on with it), "promptRequired"
        (no turn was running: it is the caller's to send as a prompt), or "startedNewTurn" (the
        agent took it as a turn of its own: never sent again). An error is "promptRequired"."""
        params = {
            "sessionId": session_id,
            "prompt": [{"type": "text", "text": text}],
            "_meta": {"steering": {"idleBehavior": "promptRequired"}},
        }
        try:
            result = await self._call("_session/steering", params)
        except RpcError:
            return "promptRequired"
        outcome = result.get("outcome") if isinstance(result, dict) else None
        return outcome if outcome in ("injected", "promptRequired") else "startedNewTurn"

    async def cancel(self, session_id: str) -> None:
        """session/cancel, then its pending questions are answered: permissions 'cancelled',
        elicitations ELICITATION_ON_CANCEL.

        The order is ACP's (prompt-turn cancellation): the agent learns the turn is cancelled
        before it reads a `cancelled` permission outcome, so it never takes that outcome for
        "the user refused this tool" and goes on with its turn.
        """
        running = self._prompts.get(session_id)
        if running is not None:
            running.cancelled = True
        try:
            await self.peer.notify("session/cancel", {"sessionId": session_id})
        except ConnectionLost:
            pass  # already gone: nothing left to cancel; the questions end with the connection
        asking = self._permissions.pop(session_id, {})
        for waiter in asking:
            waiter.cancel()
        if asking:  # the replies are written before cancel() returns
            await asyncio.wait(set(asking.values()), timeout=1.0)

    # -- session settings ------------------------------------------------------------
    def state(self, session_id: str) -> SessionState:
        """The session's modes, config options, models, usage and title as last heard."""
        state = self._states.get(session_id)
        if state is None:
            state = self._states[session_id] = SessionState()
        return state

    def _state_for_update(self, session_id: str) -> SessionState:
        """The state an update is about. A session id not yet ours may be one whose session/new
        reply is on its way: kept, but only the latest MAX_EARLY_STATES such (an agent sending
        made-up ids cannot grow this without bound)."""
        if session_id not in self._states and session_id not in self.sessions and session_id not in self._loading:
            early = [sid for sid in self._states if sid not in self.sessions and sid not in self._loading]
            for sid in early[: max(0, len(early) - MAX_EARLY_STATES + 1)]:
                del self._states[sid]
        return self.state(session_id)

    def selector(self, session_id: str, kind: str, key: str | None = None) -> Selector:
        """How the mode / model / config option `key` of a session is set; AcpError (one line)
        if the agent offers none."""
        selector = self.state(session_id).selector(kind, key)
        if selector is not None:
            return selector
        if kind == MODE:
            raise AcpError(f"{self.name} offers no modes")
        if kind == MODEL:
            raise AcpError(f"{self.name} offers no model choice")
        options = [o for o in self.state(session_id).config or () if o.settable]
        listed = ", ".join(o.id for o in options) or "none"
        raise AcpError(f"{self.name} has no option {key!r}; its options: {listed}")

    async def set_mode(self, session_id: str, wanted: str) -> tuple[Selector, str]:
        """Set the mode (by id or name): through its config option if there is one, else
        session/set_mode. Returns (the selector, the value set)."""
        return await self._set(self.selector(session_id, MODE), session_id, wanted)

    async def set_model(self, session_id: str, wanted: str) -> tuple[Selector, str]:
        """Set the model: its config option (category "model"), else the agents' session/set_model."""
        return await self._set(self.selector(session_id, MODEL), session_id, wanted)

    async def set_config_option(self, session_id: str, key: str, wanted: str) -> tuple[Selector, str]:
        return await self._set(self.selector(session_id, "config", key), session_id, wanted)

    async def _set(self, selector: Selector, session_id: str, wanted: str) -> tuple[Selector, str]:
        try:
            value = resolve(selector.choices, wanted, selector.name.lower()).id
        except ChoiceError as exc:
            raise AcpError(f"{self.name}: {exc}") from None
        await self._apply(selector, session_id, value)
        return selector, value

    async def _apply(self, selector: Selector, session_id: str, value: str) -> None:
        if selector.via == "set_mode":
            call, params = "session/set_mode", {"sessionId": session_id, "modeId": value}
        elif selector.via == "set_model":
            call, params = "session/set_model", {"sessionId": session_id, "modelId": value}
        else:
            call, params = (
                "session/set_config_option",
                {"sessionId": session_id, "configId": selector.key, "value": value},
            )
            if selector.boolean:  # stable ACP: a boolean option takes a JSON bool
                params.update(type="boolean", value=value == "true")
        try:
            result = await self._call(call, params)
        except RpcError as exc:
            raise AcpError(f"{self.name} did not take {selector.name.lower()} {value!r}: {exc.message}") from None
        state = self.state(session_id)
        state.set_current(selector, value)
        if selector.via == "config":
            state.apply_result(
                {"configOptions": result["configOptions"]}
                if isinstance(result, dict) and "configOptions" in result
                else None
            )

    async def apply_choices(self, session_id: str, choices: Choices) -> Applied:
        """Bring a session (new, loaded, after a restart or an eviction) to the owner's choices:
        only what differs, model first, mode last. Never raises for one choice: what fails
        is returned with its reason."""
        steps, skipped = plan_choices(self.state(session_id), choices)
        done, failed = [], list(skipped)
        for step in steps:
            try:
                await self._apply(step.selector, session_id, step.value)
            except AcpError as exc:
                if isinstance(exc, (AgentCrashed, AgentTimeout)):
                    raise
                failed.append(Skipped(step.selector.kind, step.selector.key, step.value, str(exc)))
            else:
                done.append((step.selector.kind, step.selector.key, step.value))
        return Applied(done, failed)

    # -- incoming -------------------------------------------------------------------
    async def _on_notification(self, method: str, params: Any) -> None:
        if method == "elicitation/complete" and isinstance(params, dict):
            await self._elicitation_complete(params)
            return
        if method != "session/update" or not isinstance(params, dict):
            log.debug("%s: ignoring notification %s", self.name, method)
            return
        raw = params.get("update")
        if not isinstance(raw, dict):
            return
        session_id = _session_id(params)
        update = normalise_update(raw)
        if update.kind == "commands":
            self.commands = normalise_commands(raw.get("availableCommands"))
            try:
                await _call(self.on_commands, self.name, self.commands)
            except Exception:
                log.exception("%s: on_commands callback failed", self.name)
        # A session's settings are kept whenever they come: before session/new returns (the
        # result, read after them, then replaces only the fields it carries), between
        # prompts, during a session/load (its result comes last and wins).
        if (
            session_id is not None
            and self._state_for_update(session_id).apply_update(update)
            and session_id not in self._loading
        ):
            try:
                await _call(self.on_state, self.name, session_id, update, self.state(session_id))
            except Exception:
                log.exception("%s: on_state callback failed", self.name)
        # A session being loaded replays its history: never an answer's
        # (docs/architecture.md "Slots and sessions"). An update reaches a prompt only if it was
        # read after that prompt was written, and only while it runs: the reader handles lines
        # strictly in order, and session/load answers after its replay, so a replay cannot reach the
        # turn that follows it.
        if session_id in self._loading:
            return
        running = self._prompts.get(session_id)
        if running is not None and running.sent:
            await _call(running.on_update, update)

    async def _elicitation_complete(self, params: dict[str, Any]) -> None:
        """elicitation/complete {elicitationId}: the URL elicitation's `completed` event is set
        (an id unknown or completed already is ignored), and it is told to the running prompts
        as an update."""
        ident = params.get("elicitationId")
        if not isinstance(ident, str):
            return
        completed = self._url_elicitations.pop(ident, None)
        if completed is not None:
            completed.set()
        update = Update(kind="elicitation_complete", text=ident, raw=params)
        for running in list(self._prompts.values()):
            if running.sent:
                await _call(running.on_update, update)

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "session/request_permission" and isinstance(params, dict):
            return await self._ask_permission(params)
        if method == "elicitation/create" and isinstance(params, dict):
            return await self._ask_elicitation(params)
        raise RpcError(framing.METHOD_NOT_FOUND, f"method not found: {method}")

    async def _ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        cancelled = {"outcome": {"outcome": "cancelled"}}
        session_id = _session_id(params)
        running = self._prompts.get(session_id)
        if running is None or running.on_permission is None or running.cancelled:
            return cancelled
        if not await self._room_for_question(session_id, running, "permission request"):
            return cancelled
        options = params.get("options")
        options = [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []
        tool_call = params.get("toolCall")
        request = PermissionRequest(session_id, tool_call if isinstance(tool_call, dict) else {}, options)
        option_id = await self._wait_for_person(session_id, _call(running.on_permission, request))
        if option_id is None or option_id not in {o.get("optionId") for o in options}:
            return cancelled
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    async def _ask_elicitation(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = _session_id(params)
        if session_id is None and self._login is not None and params.get("requestId") is not None:
            return self._login.elicitation(params)
        running = self._prompts.get(session_id) if session_id is not None else None
        if running is None or running.on_elicitation is None:
            return {"action": CANCEL}  # nobody to ask (not during a turn, or not scoped to one)
        if running.cancelled:
            return {"action": ELICITATION_ON_CANCEL}
        try:
            request = parse_request(params)
        except BadElicitation as exc:
            raise RpcError(framing.INVALID_PARAMS, f"cannot ask this: {exc}") from None
        if not await self._room_for_question(session_id, running, "question"):
            return {"action": DECLINE}
        ident = request.elicitation_id if request.mode == "url" else ""
        if ident:  # elicitation/complete may come for it, during the question or after
            request = replace(request, completed=asyncio.Event())
            self._url_elicitations.pop(ident, None)
            self._url_elicitations[ident] = request.completed
            while len(self._url_elicitations) > URL_ELICITATIONS_KEPT:
                del self._url_elicitations[next(iter(self._url_elicitations))]
        answer = None
        try:
            answer = await self._wait_for_person(session_id, _call(running.on_elicitation, request))
        finally:
            if ident and (answer is None or answer.action != ACCEPT):  # no interaction to complete
                self._url_elicitations.pop(ident, None)
        if answer is None:  # cancel() answered for the person, or the callback had no answer
            return {"action": ELICITATION_ON_CANCEL if running.cancelled else CANCEL}
        return answer.to_result()

    async def _room_for_question(self, session_id: str, running: _Prompt, what: str) -> bool:
        """False (and one line told to the turn) when MAX_QUESTIONS are already open."""
        if len(self._permissions.get(session_id, {})) < MAX_QUESTIONS:
            return True
        self.refused_questions += 1
        line = f"{self.name} asked more than {MAX_QUESTIONS} questions at once; this {what} was refused"
        log.warning("%s (session %s)", line, session_id)
        try:
            await _call(running.on_update, Update(kind="notice", text=line))
        except Exception:
            log.exception("%s: on_update failed for a notice", self.name)
        return False

    async def _wait_for_person(self, session_id: str, asking: Awaitable[Any]) -> Any:
        """Await a callback that asks a person; None when cancel() answered for them. If the
        agent cancels its request ($/cancel_request) or the connection goes, the callback is
        cancelled too."""
        waiter = asyncio.ensure_future(asking)
        # The current task is the peer's reply task: cancel() waits for it.
        self._permissions.setdefault(session_id, {})[waiter] = asyncio.current_task()
        self._asking += 1
        try:
            return await waiter
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # the agent withdrew it, or we are closing
                waiter.cancel()
                raise
            return None  # cancel() answered for the person
        finally:
            self._asking -= 1
            asking_now = self._permissions.get(session_id)
            if asking_now is not None:
                asking_now.pop(waiter, None)
                if not asking_now:  # no empty entry left per session ever asked
                    del self._permissions[session_id]
            self.peer.last_activity = time.monotonic()  # the silence clock restarts now


def prompt_blocks(prompt: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """session/prompt's `prompt`: a text is one text block; a list of blocks goes as it is."""
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    return list(prompt)


def _session_info(entry: Any) -> SessionInfo | None:
    """A session/list entry, or None if it is not one (no session id)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("sessionId"), str) or not entry["sessionId"]:
        return None
    title, updated = entry.get("title"), entry.get("updatedAt")
    cwd = entry.get("cwd")
    return SessionInfo(
        entry["sessionId"],
        cwd if isinstance(cwd, str) else "",
        title.strip() or None if isinstance(title, str) else None,
        updated if isinstance(updated, str) else None,
    )


def _session_id(params: dict[str, Any]) -> str | None:
    """The sessionId of an incoming message, if it is one (agents may send anything)."""
    value = params.get("sessionId")
    return value if isinstance(value, str) else None


async def start_agent(
    spec: AgentSpec,
    on_commands: OnCommands | None = None,
    client_capabilities: dict[str, Any] | None = None,
    on_state: OnState | None = None,
) -> Agent:
    """Spawn the agent and run initialize. Raises AgentStartError."""
    process = AgentProcess(spec.name, spec.command, spec.cwd, spec.env, spec.sandbox)
    await process.start()
    agent = Agent(spec, process, on_commands, on_state)
    agent.peer.start()
    try:
        await agent._initialize(client_capabilities)
    except AgentCrashed as exc:
        if exc.connection:  # over ssh: ssh's own reason (acp/remote.py)
            raise AgentStartError(f"{spec.name}: {exc.connection}", exc.exit_code, exc.stderr_tail) from None
        raise AgentStartError(
            f"{spec.name}: exited during initialize (exit code {exc.exit_code})"
            + (f": {last_line(exc.stderr_tail)}" if last_line(exc.stderr_tail) else ""),
            exc.exit_code,
            exc.stderr_tail,
        ) from None
    except AgentTimeout:
        raise AgentStartError(
            f"{spec.name}: no answer to initialize within {spec.timeout:g} s", None, agent.stderr_tail()
        ) from None
    except RpcError as exc:
        await agent.stop()
        raise AgentStartError(f"{spec.name}: initialize failed: {exc}", None, agent.stderr_tail(), exc.data) from None
    except BaseException:
        await agent.stop()
        raise
    return agent
