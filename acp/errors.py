"""Errors of the ACP client. Each str() is one line a person can read."""

from __future__ import annotations

from typing import Any

from .remote import connection_line, last_line


class AcpError(Exception):
    """Base of every error this package raises."""


class AgentStartError(AcpError):
    """The agent could not be started or did not get through initialize."""

    def __init__(self, message: str, exit_code: int | None = None, stderr_tail: str = "", data: Any = None):
        super().__init__(message)
        self.exit_code, self.stderr_tail = exit_code, stderr_tail
        self.data = data  # the `data` of a JSON-RPC error that ended initialize


class AgentCrashed(AcpError):
    """The agent process exited while a call was running. For an agent over ssh (`host`: where
    it runs) whose ssh failed, `connection` is ssh's reason in one line (acp/remote.py)."""

    def __init__(self, name: str, exit_code: int | None, stderr_tail: str = "", host: str | None = None):
        self.name, self.exit_code, self.stderr_tail = name, exit_code, stderr_tail
        self.connection = connection_line(host, exit_code, stderr_tail) if host else None
        if self.connection:
            super().__init__(f"{name}: {self.connection}")
            return
        detail = last_line(stderr_tail)
        super().__init__(f"{name} stopped unexpectedly (exit code {exit_code})" + (f": {detail}" if detail else ""))


class AgentStopped(AgentCrashed):
    """The agent was stopped on purpose (pool eviction, shutdown) during a call."""

    def __init__(self, name: str, exit_code: int | None, stderr_tail: str = "", host: str | None = None):
        super().__init__(name, exit_code, stderr_tail, host)
        self.args = (f"{name} was stopped while answering",)


class AgentTimeout(AcpError):
    """The agent was silent past its time limit during a call."""

    def __init__(self, name: str, seconds: float, killed: bool):
        self.name, self.seconds, self.killed = name, seconds, killed
        what = "it was stopped" if killed else "the answer was cancelled"
        super().__init__(f"{name} was silent for {seconds:g} s; {what}")


class AuthRequired(AcpError):
    """The agent wants the user to authenticate before it opens sessions."""

    def __init__(self, name: str, methods: list[dict[str, Any]]):
        self.name, self.methods = name, methods
        names = ", ".join(str(m.get("name") or m.get("id")) for m in methods) or "no method announced"
        super().__init__(f"{name} requires authentication ({names}); log in with the agent itself first")


class RpcError(AcpError):
    """The peer answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None):
        self.code, self.message, self.data = code, message, data
        super().__init__(f"{message} (JSON-RPC error {code})")


class ConnectionLost(AcpError):
    """The connection closed (the process exited) before a reply came."""
