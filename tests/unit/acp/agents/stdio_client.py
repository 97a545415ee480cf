"""A minimal blocking ACP client for driving an agent subprocess in tests.

Deliberately independent of the project's own ACP client: it only frames
JSON-RPC lines, so these tests check the agent against the wire protocol.
Every stdout line must be a JSON object; anything else fails the test.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[4]


class AgentProcess:
    """`program` (default: the shipped local agent) run with `args`."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, program: list[str] | None = None) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*(program or [sys.executable, "-m", "acp.agents.local_model"]), *args],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.bad_lines: list[bytes] = []
        self.stderr_lines: list[str] = []
        self._ids = 0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                message = json.loads(line)
                assert isinstance(message, dict)
            except (ValueError, AssertionError):
                self.bad_lines.append(line)
                continue
            self.inbox.put(message)
        self.inbox.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace").rstrip("\n"))

    # -- sending ----------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def start_request(self, method: str, params: dict[str, Any]) -> int:
        self._ids += 1
        self.send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return self._ids

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # -- receiving ----------------------------------------------------------------
    def next_message(self, timeout: float) -> dict[str, Any]:
        try:
            message = self.inbox.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no message from the agent within {timeout} s; stderr: {self.stderr_lines[-5:]}"
            ) from None
        if message is None:
            raise AssertionError(f"agent closed stdout; exit {self.proc.poll()}; stderr: {self.stderr_lines[-5:]}")
        return message

    def wait_reply(
        self, request_id: int, timeout: float = 60.0, updates: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """The response to request_id; session/update params seen meanwhile go to `updates`."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.next_message(max(deadline - time.monotonic(), 0.01))
            if message.get("id") == request_id and "method" not in message:
                return message
            if message.get("method") == "session/update" and updates is not None:
                updates.append(message["params"])

    def call(
        self, method: str, params: dict[str, Any], timeout: float = 60.0, updates: list[dict[str, Any]] | None = None
    ) -> Any:
        reply = self.wait_reply(self.start_request(method, params), timeout, updates)
        assert "error" not in reply, reply
        return reply["result"]

    def stderr_matches(self, pattern: re.Pattern, count: int = 1, timeout: float = 120.0) -> list[re.Match]:
        """The first `count` stderr lines matching `pattern`, waiting for them."""
        deadline = time.monotonic() + timeout
        while True:
            found = [m for m in map(pattern.search, list(self.stderr_lines)) if m]
            if len(found) >= count:
                return found[:count]
            if time.monotonic() > deadline:
                raise AssertionError(f"no line like {pattern.pattern!r}: {self.stderr_lines[-5:]}")
            time.sleep(0.05)

    def drain(self, seconds: float) -> list[dict[str, Any]]:
        """Whatever arrives within `seconds`."""
        seen = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.inbox.get(timeout=left)
            except queue.Empty:
                break
            if message is None:
                break
            seen.append(message)
        return seen

    # -- convenience ------------------------------------------------------------
    def initialize(self) -> dict[str, Any]:
        return self.call(
            "initialize",
            {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
        )

    def new_session(self, cwd: str = "/") -> str:
        return self.call("session/new", {"cwd": cwd, "mcpServers": []})["sessionId"]

    def prompt(self, session_id: str, text: str, timeout: float = 120.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the reply message, the session/update params received before it)."""
        updates: list[dict[str, Any]] = []
        request_id = self.start_request(
            "session/prompt", {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        )
        return self.wait_reply(request_id, timeout, updates), updates

    def close(self, timeout: float = 10.0) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("the agent did not exit after stdin closed") from None


def chunks(updates: list[dict[str, Any]], kind: str = "agent_message_chunk") -> list[str]:
    return [u["update"]["content"]["text"] for u in updates if u["update"]["sessionUpdate"] == kind]
