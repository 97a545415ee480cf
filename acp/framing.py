"""ACP wire framing: newline-delimited JSON-RPC 2.0, with no I/O at all.

Both sides of the connection (our client in `rpc.py`, the agent toolkit in
`agent_kit.py`) feed raw bytes in and get messages out, so the parsing rules
live in one place and can be tested without processes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator

# JSON-RPC 2.0 error codes, plus ACP's "authentication required".
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
AUTH_REQUIRED = -32000

REQUEST = "request"
NOTIFICATION = "notification"
RESPONSE = "response"
INVALID = "invalid"


class LineBuffer:
    """Collects bytes and hands out complete lines (without the newline).

    There is deliberately no size limit: agents may put many MiB on one line.
    Only the newly fed bytes are ever searched for a newline, and a partial
    line is kept as a list of pieces joined once, so feeding a huge line in
    small chunks stays linear.
    """

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._pending = 0

    @property
    def pending(self) -> int:
        """Bytes held for a line whose newline has not arrived yet."""
        return self._pending

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        cut = data.find(b"\n")
        if cut < 0:
            self._pieces.append(data)
            self._pending += len(data)
            return []
        first = data[:cut]
        if self._pieces:
            self._pieces.append(first)
            first = b"".join(self._pieces)
            self._pieces = []
            self._pending = 0
        lines = [first]
        rest = data[cut + 1:].split(b"\n")
        lines.extend(rest[:-1])
        if rest[-1]:
            self._pieces.append(rest[-1])
            self._pending = len(rest[-1])
        return [line[:-1] if line.endswith(b"\r") else line for line in lines]

    def close(self) -> bytes | None:
        """End of stream: the unterminated last line, if any."""
        if not self._pieces:
            return None
        tail = b"".join(self._pieces)
        self._pieces, self._pending = [], 0
        return tail[:-1] if tail.endswith(b"\r") else tail


@dataclass(frozen=True)
class ParseError:
    """A line that is not a JSON-RPC message; reported, never raised."""

    reason: str
    preview: str  # the start of the offending line, for logs

    def __str__(self) -> str:
        return f"{self.reason}: {self.preview!r}"


def encode(message: dict[str, Any]) -> bytes:
    """One message as one line. json.dumps escapes newlines inside strings."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def decode(line: bytes | str) -> dict[str, Any] | ParseError:
    preview = line[:200]
    if isinstance(preview, bytes):
        preview = preview.decode("utf-8", "replace")
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return ParseError(f"malformed JSON ({exc.__class__.__name__}: {exc})"[:300], preview)
    if not isinstance(message, dict):
        # ACP never uses JSON-RPC batches, so anything but an object is wrong.
        return ParseError(f"expected a JSON object, got {type(message).__name__}", preview)
    return message


def classify(message: dict[str, Any]) -> str:
    """'request' | 'notification' | 'response' | 'invalid'."""
    method = message.get("method")
    ident = message.get("id")
    # JSON-RPC ids are strings, numbers or null; anything else could not even be looked up
    if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int, float))):
        return INVALID
    if method is not None:
        if not isinstance(method, str):
            return INVALID
        return REQUEST if ident is not None else NOTIFICATION
    if "id" in message and ("result" in message or "error" in message):
        return RESPONSE
    return INVALID


def iter_messages(buffer: LineBuffer, data: bytes) -> Iterator[dict[str, Any] | ParseError]:
    """Feed bytes and decode every complete non-blank line."""
    for line in buffer.feed(data):
        if line.strip():
            yield decode(line)


def request(id: int | str, method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: Any = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def result(id: int | str | None, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": value}


def error(id: int | str | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": err}
