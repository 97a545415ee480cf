"""A scripted ACP client, as Zed or acpx would be: it starts `sidekicks acp` as its agent (a
separate process, over stdio) and speaks ACP to it, one JSON line each way.

    client = await AcpClient.start(config_path, xdg, agent="alice")
    await client.call("initialize", {...})
    client.updates(session_id)          # every session/update it was sent for that session
    client.permission_policy = "allow"  # how it answers session/request_permission (None: holds)

Used by tests/integration/test_attach.py (docs/sessions.md "Attach an editor").
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bridge_harness import wait_until


class AcpClient:
    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process, self.name = process, name
        self.received: list[dict] = []  # every message from `sidekicks acp`, in order
        self.arrived: list[float] = []  # when each came (time.perf_counter(): for benchmarks)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self.permission_policy: str | None = None  # an optionId kind to choose: allow_once…; None: hold
        self.held: dict[Any, dict] = {}  # permission requests and questions held, by request id
        self.question_answer: dict | None = None  # the result it gives elicitation/create; None: holds
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, config_path: Path, xdg: Path, agent: str | None = None, name: str = "Zed") -> AcpClient:
        args = ["-m", "bridge", "acp", "-c", str(config_path), *(["--agent", agent] if agent else [])]
        return await cls.spawn([sys.executable, *args], {"XDG_CONFIG_HOME": str(xdg)}, name)

    @classmethod
    async def spawn(cls, command: list[str], env: dict[str, str], name: str = "Zed") -> AcpClient:
        """The client of any ACP agent `command` (a benchmark drives an agent directly too)."""
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **env},
            limit=1 << 24,
        )
        return cls(process, name)

    async def initialize(self) -> dict:
        return await self.call(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {"elicitation": {"form": {}}},
                "clientInfo": {"name": self.name.lower(), "title": self.name},
            },
        )

    async def _write(self, message: dict) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        await self.process.stdin.drain()

    async def call(self, method: str, params: dict, timeout: float = 60) -> Any:
        ident = next(self._ids)
        future = self._pending[ident] = asyncio.get_running_loop().create_future()
        await self._write({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        message = await asyncio.wait_for(future, timeout)
        if "error" in message:
            raise RuntimeError(f"{method}: {message['error']}")
        return message["result"]

    def send_soon(self, method: str, params: dict) -> asyncio.Future:
        """A request whose answer the test awaits later (a prompt that runs a while)."""
        return asyncio.ensure_future(self.call(method, params, timeout=120))

    async def notify(self, method: str, params: dict) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def answer(self, request_id: Any, option_id: str) -> None:
        """Answer a held permission request."""
        self.held.pop(request_id, None)
        await self._write(
            {"jsonrpc": "2.0", "id": request_id, "result": {"outcome": {"outcome": "selected", "optionId": option_id}}}
        )

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            message = json.loads(line)
            self.arrived.append(time.perf_counter())
            self.received.append(message)
            if "method" not in message:
                future = self._pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(message)
            elif message["method"] == "session/request_permission" and "id" in message:
                await self._permission(message)
            elif message["method"] == "elicitation/create" and "id" in message:
                if self.question_answer is None:
                    self.held[message["id"]] = message
                else:
                    await self._write({"jsonrpc": "2.0", "id": message["id"], "result": self.question_answer})
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("sidekicks acp ended"))

    async def _permission(self, message: dict) -> None:
        options = message["params"]["options"]
        chosen = next((o for o in options if o.get("kind") == self.permission_policy), None)
        if chosen is None:
            self.held[message["id"]] = message
            return
        await self.answer(message["id"], chosen["optionId"])

    # ---- what it saw ------------------------------------------------------------------------

    def updates(self, session_id: str, kind: str | None = None) -> list[dict]:
        found = [
            m["params"]["update"]
            for m in self.received
            if m.get("method") == "session/update" and m["params"].get("sessionId") == session_id
        ]
        return [u for u in found if kind is None or u.get("sessionUpdate") == kind]

    def text(self, session_id: str, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"].get("text", "") for u in self.updates(session_id, kind))

    def cancelled_requests(self) -> list[Any]:
        return [m["params"]["requestId"] for m in self.received if m.get("method") == "$/cancel_request"]

    async def wait_for(self, predicate, what: str, timeout: float = 60) -> None:
        await wait_until(predicate, timeout, what)

    async def ended(self, timeout: float = 30) -> int:
        return await asyncio.wait_for(self.process.wait(), timeout)

    async def close(self) -> None:
        if self.process.returncode is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
