"""What `sidekicks mcp` and the running bridge say over the private socket: one JSON line each
way per tool call. Pure (tests/unit/mcp/test_mcp_wire.py).

    → {"secret": "…", "tool": "history", "arguments": {"limit": 5}}
    ← {"text": "…", "error": false}

The secret says which session's conversation the call acts on (service.py); a line longer than
MAX_LINE is refused unread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_LINE = 1 << 20
ENV_SOCKET = "SIDEKICKS_MCP_SOCKET"
ENV_SECRET = "SIDEKICKS_MCP_SECRET"


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class Request:
    secret: str
    tool: str
    arguments: dict[str, Any]


def request_line(secret: str, tool: str, arguments: dict[str, Any] | None) -> bytes:
    return (
        json.dumps({"secret": secret, "tool": tool, "arguments": arguments or {}}, ensure_ascii=False).encode() + b"\n"
    )


def read_request(line: bytes) -> Request:
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("not a JSON line") from None
    if not isinstance(data, dict) or not isinstance(data.get("secret"), str) or not isinstance(data.get("tool"), str):
        raise BadRequest("a request needs a secret and a tool")
    arguments = data.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise BadRequest("the arguments must be an object")
    return Request(data["secret"], data["tool"], arguments)


def reply_line(text: str, error: bool = False) -> bytes:
    return json.dumps({"text": text, "error": bool(error)}, ensure_ascii=False).encode() + b"\n"


def read_reply(line: bytes) -> tuple[str, bool]:
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return "the bridge sent an unreadable answer", True
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        return "the bridge sent an unreadable answer", True
    return data["text"], bool(data.get("error"))
