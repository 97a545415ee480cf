"""The bridge's side of the `matrix` MCP server: the private socket, one secret per session's
conversation, the `mcpServers` entries a session is opened with, and each call dispatched.

- The socket is `mcp.sock` in the data folder (0700; the socket 0600), or, when that path is too
  long for a Unix socket (108 bytes), in a private temporary folder (0700) made for this run.
- A secret (32 random bytes, hex) stands for one session of an agent in one (channel,
  conversation): it is given to the agent in the `env` of the stdio entry (and as a header of
  the HTTP entry) when the session is opened, loaded, resumed or forked, and a call carrying it
  acts there and nowhere else. It lives as long as its reason (docs/SECURITY.md): the next
  session opened in that conversation (`!reset`, `!resume` of another, a reload) gets a new one
  and the old one is revoked; a call is refused, and its secret revoked, once the agent is no
  longer a member of the channel (it left, it was kicked), the conversation has no session any
  more (its thread was deleted) or the channel is gone. Secrets are kept hashed; after a restart
  the sessions are loaded again and get new ones.
- Over HTTP too (http.py: the SDK's streamable HTTP on 127.0.0.1, the secret as a bearer token)
  for agents that announce `mcpCapabilities.http`.
- Limits: `limits.tool_calls_per_turn` calls per turn of the agent in that conversation; at most
  MAX_WAITING connections waiting for their request line (READ_TIMEOUT each; one more is closed
  at once, unread) and PER_SESSION calls of one session at a time, so that an agent holding
  connections cannot take the bridge's file descriptors (docs/SECURITY.md "Limits").
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import shutil
import stat
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store.errors import StoreError

from . import actions, tools, wire
from .actions import Refused, Scope

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from ..channels.base.registry import Channels
    from ..channels.turns.portal import Portal

log = logging.getLogger(__name__)

SOCKET_NAME = "mcp.sock"
MAX_SOCKET_PATH = 100  # bytes: sun_path holds 108, with its NUL
READ_TIMEOUT = 5.0  # seconds a connection may take to send its request (`sidekicks mcp` sends at once)
MAX_WAITING = 64  # connections that have not sent their request yet, of all sessions: more are closed
PER_SESSION = 8  # calls of one session at a time: more are refused in one line


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def stdio_command() -> tuple[str, list[str]]:
    """How an agent starts `sidekicks mcp`: this Python, so it works whatever is on PATH, in
    isolated mode (`-I`: neither the working directory nor PYTHONPATH nor any PYTHON* variable
    nor the user's site-packages is read), so that a project's `config.py` or `bridge/` in the
    folder the agent starts it from is never imported in place of the bridge's own modules
    (docs/SECURITY.md)."""
    return sys.executable, ["-I", "-m", "bridge", "mcp"]


class McpService:
    def __init__(self, config: Config, db: OffLoop, channels: Channels, means: actions.Means) -> None:
        """`channels`: the open portals (whose turn a call counts against); `means`: what the
        tools act through (actions.py)."""
        self.config, self.db, self.channels, self.means = config, db, channels, means
        self.path: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._private_dir: str | None = None
        self._scopes: dict[str, Scope] = {}  # hash of a secret → its scope
        self._secrets: dict[Scope, str] = {}  # scope → its secret
        self._calls: dict[Scope, tuple[Any, int]] = {}  # scope → (the turn counted, calls in it)
        self.calls = 0  # calls answered (for tests and logs)
        self.closed_unread = 0  # connections closed because MAX_WAITING were waiting (tests, logs)
        self._waiting = 0  # connections that have not sent their request yet
        self._running: dict[str, int] = {}  # hash of a secret → its calls being answered
        self._http = None  # http.py's HttpMcp, listening from start, serving from the first use

    @property
    def http_url(self) -> str | None:
        """The HTTP endpoint, for agents that announce mcpCapabilities.http."""
        return self._http.url if self._http is not None else None

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        if not any(agent.tools for agent in self.config.agents.values()):
            return
        folder = Path(self.config.data_dir)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        path = folder / SOCKET_NAME
        if len(os.fsencode(str(path))) > MAX_SOCKET_PATH:
            self._private_dir = tempfile.mkdtemp(prefix="sidekicks-mcp-")  # 0700
            path = Path(self._private_dir) / SOCKET_NAME
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)  # left by a bridge that was killed (the store's lock says none runs)
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._client, path=str(path), limit=wire.MAX_LINE + 1)
        except OSError as exc:  # the bridge goes on: agents just get no tools this time
            log.warning(
                "the agents' MCP server cannot listen on %s (%s): agents get no tools this run",
                path,
                exc.strerror or exc,
            )
            return
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.path = path
        log.info("the agents' MCP server listens on %s", path)
        from .http import HttpMcp

        http = HttpMcp(self.call, lambda secret: _hash(secret) in self._scopes)
        try:
            http.bind()  # served from the first session of an agent that announces HTTP
            self._http = http
        except OSError as exc:  # stdio is what every agent has: the bridge goes on without HTTP
            log.warning("the MCP server over HTTP cannot listen (%s): agents get it over stdio only", exc)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._server is not None:
            self._server.close()
            try:
                await asyncio.wait_for(self._server.wait_closed(), 2)
            except TimeoutError:
                pass
            self._server = None
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)

    # -- what a session is opened with -------------------------------------------------------------

    def servers_for(self, portal: Portal, agent_name: str, agent: Any = None, conversation: str = "") -> list[dict]:
        """The `mcpServers` of a session of `agent_name` in `portal`'s `conversation` ("" the
        main timeline, else a thread: each session acts in its own): the
        stdio entry (`sidekicks mcp`), then, where the agent announces `mcpCapabilities.http`,
        the HTTP entry of the same name (agents key their servers by name: the later one is
        used); none with `tools: off`."""
        agent_config = self.config.agents.get(agent_name)
        if agent_config is None or not agent_config.tools or self.path is None:
            return []
        # asked just before a session is opened, loaded, resumed or forked there: that session's
        # secret, the conversation's earlier session's revoked
        secret = self.renew(Scope(portal.channel.id, portal.room_id, conversation, agent_name))
        command, args = stdio_command()
        servers = [
            {
                "name": tools.SERVER_NAME,
                "command": command,
                "args": args,
                "env": [{"name": wire.ENV_SOCKET, "value": str(self.path)}, {"name": wire.ENV_SECRET, "value": secret}],
            }
        ]
        announced = getattr(agent, "mcp_capabilities", None) or {}
        if announced.get("http") and self.http_url:
            self._http.serve()
            servers.append(
                {
                    "type": "http",
                    "name": tools.SERVER_NAME,
                    "url": self.http_url,
                    "headers": [{"name": "Authorization", "value": f"Bearer {secret}"}],
                }
            )
        return servers

    def renew(self, scope: Scope) -> str:
        """A new secret for the session about to be opened in `scope`; the one before is revoked."""
        self.revoke(scope)
        secret = self._secrets[scope] = secrets.token_hex(32)
        self._scopes[_hash(secret)] = scope
        return secret

    def revoke(self, scope: Scope) -> None:
        """`scope`'s secret reaches nothing any more."""
        secret = self._secrets.pop(scope, None)
        if secret is not None:
            self._scopes.pop(_hash(secret), None)
        self._calls.pop(scope, None)

    def forget_channel(self, channel_id: str) -> None:
        """The channel is deleted: its secrets reach nothing any more."""
        for scope in [s for s in self._secrets if s.channel_id == channel_id]:
            self.revoke(scope)

    # -- calls -------------------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._waiting >= MAX_WAITING:  # a flood: closed unread, its descriptor freed at once
            self._closed_unread(writer)
            return
        self._waiting += 1
        request: wire.Request | None = None
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT)
                request = wire.read_request(line)
            except (TimeoutError, ValueError, asyncio.LimitOverrunError) as exc:
                text, error = f"bad request: {exc or type(exc).__name__}", True
            finally:
                self._waiting -= 1
            if request is not None:
                text, error = await self._one_of_a_session(request.secret, request.tool, request.arguments)
            writer.write(wire.reply_line(text, error))
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()

    def _closed_unread(self, writer: asyncio.StreamWriter) -> None:
        if self.closed_unread % 1000 == 0:  # one line per thousand, never a line per connection
            log.warning(
                "the agents' MCP socket: %d connections wait for their request; more are closed unread (%d so far)",
                MAX_WAITING,
                self.closed_unread + 1,
            )
        self.closed_unread += 1
        writer.transport.abort()

    async def _one_of_a_session(self, secret: str, tool: str, arguments: dict) -> tuple[str, bool]:
        """`call`, unless PER_SESSION calls with this secret are being answered already."""
        key = _hash(secret)
        if self._running.get(key, 0) >= PER_SESSION:
            return f"at most {PER_SESSION} tool calls of a session at a time: this one was not made", True
        self._running[key] = self._running.get(key, 0) + 1
        try:
            return await self.call(secret, tool, arguments)
        finally:
            self._running[key] -= 1
            if not self._running[key]:
                del self._running[key]

    async def call(self, secret: str, tool: str, arguments: dict) -> tuple[str, bool]:
        """One tool call: (the result's text, whether it is an error)."""
        scope = self._scopes.get(_hash(secret))
        if scope is None:
            return (
                "this session is not known to the running bridge (it was restarted since, or the "
                "conversation was deleted): the tools work again in the next turn"
            ), True
        channel = await self.db.channel(scope.channel_id)
        if channel is None:
            self.revoke(scope)
            return "this conversation's channel was deleted: there is nothing here to act on", True
        gone = await actions.standing(self.db, scope)
        if gone is not None:  # the secret's reason is gone: revoked for good
            self.revoke(scope)
            log.info("%s in %s: an MCP call refused and its secret revoked: %s", scope.agent, scope.room_id, gone)
            return gone, True
        key = scope
        if channel.room_id != scope.room_id:  # the room was upgraded: the channel lives on in the new one
            scope = replace(scope, room_id=channel.room_id)
        config = self.config
        if scope.agent not in config.agents or not config.agents[scope.agent].tools:
            return f"{scope.agent} has no tools (agents.{scope.agent}.tools: off)", True
        try:
            args = tools.check(tool, arguments, config.history_messages)
        except tools.BadArguments as exc:
            return str(exc), True
        refused = self._count(key, scope.room_id)
        if refused:
            return refused, True
        self.calls += 1
        try:
            return await actions.run(self.means, scope, tool, args), False
        except (Refused, tools.BadArguments) as exc:
            log.info("%s in %s: %s refused: %s", scope.agent, scope.room_id, tool, exc)
            return str(exc), True
        except StoreError as exc:
            return f"the bridge's database failed ({exc}): nothing was done", True
        except Exception as exc:
            log.exception("%s in %s: %s failed", scope.agent, scope.room_id, tool)
            return f"the bridge could not do this ({type(exc).__name__}: {exc})", True

    def _count(self, scope: Scope, room_id: str) -> str | None:
        """None if the call may go on (and it is counted), else why not."""
        portal = self.channels.portals.get(room_id)
        current = portal.runs.get(scope.conversation) if portal is not None else None  # its conversation's turn
        turn = current if current is not None and current.agent_name == scope.agent else None
        counted, calls = self._calls.get(scope, (None, 0))
        if counted is not turn:
            calls = 0
        limit = self.config.tool_calls_per_turn
        if calls >= limit:
            return f"at most {limit} tool calls per turn (limits.tool_calls_per_turn): this one was not made"
        self._calls[scope] = (turn, calls + 1)
        return None
