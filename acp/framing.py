"""ACP wire framing: newline-delimited JSON-RPC 2.0, with no I/O at all.

Both sides of the connection (our client in `rpc.py`, the agent toolkit in
`agent_kit.py`) feed raw bytes in and get messages out, so the parsing rules
live in one place and can be tested without processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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


# The longest line (one JSON-RPC message) either side keeps: agents legitimately put megabytes
# on one line (a file's content, a big tool result; the tests send 5 MiB), so the limit is far
# above that. A longer line is dropped as it streams in, never held: memory stays bounded
# whatever an agent writes, and the reader reports it (iter_messages yields a ParseError).
MAX_LINE_BYTES = 64 * 1024 * 1024


class OversizedLine(bytes):
    """What `LineBuffer.feed` hands out for a line over the limit: its first bytes only."""

    size: int = 0  # how long the line was, in bytes (more than the limit)
    limit: int = 0


class LineBuffer:
    """Collects bytes and hands out complete lines (without the newline).

    Only the newly fed bytes are ever searched for a newline, and a partial line is kept as a
    list of pieces joined once, so feeding a huge line in small chunks stays linear. A line
    longer than `limit` (MAX_LINE_BYTES) is dropped while it arrives: what is held never
    exceeds the limit, and in its place comes an OversizedLine with its first bytes.
    """

    PREVIEW = 200

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit or MAX_LINE_BYTES
        self._pieces: list[bytes] = []
        self._pending = 0
        self._skipped = 0  # > 0: inside a line over the limit, this many bytes dropped so far
        self._preview = b""
        self.dropped = 0  # lines dropped for their length

    @property
    def pending(self) -> int:
        """Bytes held for a line whose newline has not arrived yet."""
        return self._pending

    def _hold(self, piece: bytes) -> None:
        if self._skipped:
            self._skipped += len(piece)
        elif self._pending + len(piece) > self.limit:
            self._preview = (b"".join(self._pieces) + piece[: self.PREVIEW])[: self.PREVIEW]
            self._skipped = self._pending + len(piece)
            self._pieces, self._pending = [], 0
        else:
            self._pieces.append(piece)
            self._pending += len(piece)

    def _end_line(self, last: bytes) -> bytes:
        """The line now complete with `last` (its final piece, newline excluded)."""
        self._hold(last)
        if self._skipped:
            oversized = OversizedLine(self._preview)
            oversized.size, oversized.limit = self._skipped, self.limit
            self._skipped, self._preview = 0, b""
            self.dropped += 1
            return oversized
        line = b"".join(self._pieces) if len(self._pieces) > 1 else (self._pieces[0] if self._pieces else b"")
        self._pieces, self._pending = [], 0
        return line

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        cut = data.find(b"\n")
        if cut < 0:
            self._hold(data)
            return []
        lines = [self._end_line(data[:cut])]
        rest = data[cut + 1 :].split(b"\n")
        for line in rest[:-1]:
            lines.append(self._end_line(line))
        if rest[-1]:
            self._hold(rest[-1])
        return [line if isinstance(line, OversizedLine) or not line.endswith(b"\r") else line[:-1] for line in lines]

    def close(self) -> bytes | None:
        """End of stream: the unterminated last line, if any."""
        if not self._pieces and not self._skipped:
            return None
        tail = self._end_line(b"")
        return tail[:-1] if tail.endswith(b"\r") and not isinstance(tail, OversizedLine) else tail


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
    if isinstance(line, OversizedLine):
        return ParseError(
            f"a line of {line.size:,} bytes, over the {line.limit:,}-byte limit of one ACP message, was dropped",
            line.decode("utf-8", "replace"),
        )
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
