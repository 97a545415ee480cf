"""session/update notifications, normalised into one small dataclass.

The bridge only needs a few fields to render progress; everything else stays
available in `raw`. Unknown update kinds (ACP grows) become kind 'unknown'
rather than errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = {
    "agent_message_chunk": "text",
    "agent_thought_chunk": "thought",
    "user_message_chunk": "user_text",
    "tool_call": "tool_call",
    "tool_call_update": "tool_call_update",
    "plan": "plan",
    "available_commands_update": "commands",
    "current_mode_update": "mode",
    "session_info_update": "session_info",
    "usage_update": "usage",
}


@dataclass
class Update:
    kind: str  # one of KINDS' values, or 'unknown'
    text: str = ""
    tool_call_id: str | None = None
    title: str | None = None
    status: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def content_text(block: Any) -> str:
    """Text of a content block; non-text blocks become short placeholders."""
    if isinstance(block, list):
        return "".join(content_text(b) for b in block)
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text") or "")
    if kind in ("image", "audio"):
        return f"[{kind}]"
    if kind == "resource_link":
        return f"[{block.get('title') or block.get('name') or block.get('uri') or 'link'}]"
    if kind == "resource":
        resource = block.get("resource") or {}
        return f"[resource: {resource.get('uri') or '?'}]"
    return f"[{kind or 'content'}]"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def normalise_update(raw: dict[str, Any]) -> Update:
    name = raw.get("sessionUpdate")
    kind = KINDS.get(name, "unknown") if isinstance(name, str) else "unknown"
    update = Update(kind=kind, raw=raw)
    if kind in ("text", "thought", "user_text"):
        update.text = content_text(raw.get("content"))
    elif kind in ("tool_call", "tool_call_update"):
        update.tool_call_id = _str(raw.get("toolCallId"))
        update.title = _str(raw.get("title"))
        update.status = _str(raw.get("status")) or ("pending" if kind == "tool_call" else None)
    elif kind == "session_info":
        update.title = _str(raw.get("title"))
    elif kind == "mode":
        update.text = _str(raw.get("currentModeId")) or ""
    return update


def normalise_commands(value: Any) -> list[dict[str, Any]]:
    """available_commands_update's list, keeping only well-formed entries."""
    commands = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
            commands.append({"name": item["name"], "description": str(item.get("description") or ""),
                             "input": item.get("input")})
    return commands
