"""What an attached ACP client and the bridge say of the bridge's conversations
(docs/sessions.md "Attach an editor"). Pure: no I/O (tests/unit/attach/test_wire.py).

- A conversation is an ACP session to the client: its id is `sk-<channel id>` for a room's main
  timeline, `sk-<channel id>-<thread root event id>` for a thread.
- `session/list` pages (`cursor`: the index of the next entry, as text), filtered by `cwd`.
- `session/load` replays the stored messages as `user_message_chunk` / `agent_message_chunk`.
- A prompt from a client is shown in the room as a notice quoting it: "💻 from Zed: …".
- `sidekicks acp` opens the socket with one hello line (which agent it was started for), then
  the socket carries the client's ACP stream as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PREFIX = "sk-"
PAGE = 50  # sessions a session/list answer holds at most
TITLE_CHARS = 80
HELLO_MAX = 4096  # bytes of the hello line


def session_id(channel_id: str, conversation: str) -> str:
    """The ACP session id of a conversation (its channel's main timeline: "")."""
    return f"{PREFIX}{channel_id}" + (f"-{conversation}" if conversation else "")


def conversation_of(session: Any) -> tuple[str, str] | None:
    """(channel id, conversation) of a session id this bridge gave, else None."""
    if not isinstance(session, str) or not session.startswith(PREFIX):
        return None
    rest = session[len(PREFIX) :]
    channel, _, conversation = rest.partition("-")
    if not channel or (conversation and not conversation.startswith("$")):
        return None
    return channel, conversation


@dataclass(frozen=True)
class Listed:
    """One conversation as session/list shows it."""

    session_id: str
    cwd: str
    title: str
    updated_ms: int

    def info(self) -> dict[str, Any]:
        return {"sessionId": self.session_id, "cwd": self.cwd, "title": self.title, "updatedAt": iso(self.updated_ms)}


def iso(ms: int) -> str:
    """An ISO 8601 time in UTC, as ACP's `updatedAt` is."""
    import datetime

    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def title_of(place: str, first_text: str) -> str:
    """A conversation's title: where it is, and how it began."""
    words = " ".join(first_text.split())
    if len(words) > TITLE_CHARS:
        words = words[: TITLE_CHARS - 1] + "…"
    return f"{place}: {words}" if words else place


def page(entries: list[Listed], cwd: Any = None, cursor: Any = None) -> dict[str, Any]:
    """A session/list result: the entries (newest first) in `cwd` if given, from `cursor`."""
    if isinstance(cwd, str) and cwd:
        entries = [e for e in entries if e.cwd.rstrip("/") == cwd.rstrip("/")]
    start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
    chosen = entries[start : start + PAGE]
    result: dict[str, Any] = {"sessions": [e.info() for e in chosen]}
    if start + PAGE < len(entries):
        result["nextCursor"] = str(start + PAGE)
    return result


def history(session: str, messages: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """session/update params replaying (role, text) messages, oldest first."""
    kinds = {"user": "user_message_chunk", "agent": "agent_message_chunk"}
    return [
        {"sessionId": session, "update": {"sessionUpdate": kinds[role], "content": {"type": "text", "text": text}}}
        for role, text in messages
        if role in kinds
    ]


def user_chunk(session: str, text: str) -> dict[str, Any]:
    """A session/update telling a client what the owner wrote elsewhere."""
    return history(session, [("user", text)])[0]


def client_name(params: Any) -> str:
    """The client's name from initialize's `clientInfo` (title, else name), else "an ACP client"."""
    info = params.get("clientInfo") if isinstance(params, dict) else None
    if isinstance(info, dict):
        for key in ("title", "name"):
            value = info.get(key)
            if isinstance(value, str) and value.strip():
                return " ".join(value.split())[:40]
    return "an ACP client"


def asks_forms(params: Any) -> bool:
    """Whether initialize's `clientCapabilities` take form questions (`elicitation.form`)."""
    caps = params.get("clientCapabilities") if isinstance(params, dict) else None
    elicitation = caps.get("elicitation") if isinstance(caps, dict) else None
    return isinstance(elicitation, dict) and isinstance(elicitation.get("form"), dict)


def quoted(client: str, text: str) -> str:
    """How a client's prompt shows in the room: the appservice cannot write as the owner."""
    return f"💻 from {client}: {text}"


def prompt_text(blocks: Any) -> str:
    """The text of a prompt's content blocks: text as it is, an embedded resource's text in a
    fenced block, a link by its name; other kinds by a short placeholder."""
    parts = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text") or ""))
        elif kind == "resource":
            resource = block.get("resource")
            resource = resource if isinstance(resource, dict) else {}
            uri, text = resource.get("uri") or "?", resource.get("text")
            parts.append(f"{uri}:\n```\n{text}\n```" if isinstance(text, str) else f"[{uri}]")
        elif kind == "resource_link":
            parts.append(f"[{block.get('name') or block.get('uri') or 'link'}]({block.get('uri') or ''})")
        else:
            parts.append(f"[{kind or 'content'}]")
    return "\n".join(p for p in parts if p)


def hello_line(agent: str | None) -> bytes:
    return json.dumps({"sidekicks": "acp", "agent": agent}).encode() + b"\n"


def read_hello(line: bytes) -> str | None:
    """The agent a `sidekicks acp` was started for (None: any); ValueError if no hello."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not a hello line") from None
    if not isinstance(data, dict) or data.get("sidekicks") != "acp":
        raise ValueError("not a hello line")
    agent = data.get("agent")
    return agent if isinstance(agent, str) and agent else None
