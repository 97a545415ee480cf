"""session/update notifications, normalised into one small dataclass.

Each kind gets the fields the bridge renders, parsed tolerantly (see acp/toolcalls.py and
acp/session_state.py for what ACP v1 says about them); everything else stays available in
`raw`. Unknown update kinds (ACP grows) become kind 'unknown' rather than errors.

Fields that ACP lets an update leave out are None when left out: a tool_call_update without
`content` keeps the call's content, one with `content: []` clears it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .session_state import ConfigOption, Usage, parse_config_options, parse_usage
from .toolcalls import (
    TOOL_KINDS,
    TOOL_STATUSES,
    Location,
    PlanEntry,
    TerminalMeta,
    ToolContent,
    parse_content,
    parse_locations,
    parse_plan,
    parse_terminal_meta,
)

KINDS = {
    "agent_message_chunk": "text",
    "agent_thought_chunk": "thought",
    "user_message_chunk": "user_text",
    "tool_call": "tool_call",
    "tool_call_update": "tool_call_update",
    "plan": "plan",
    "available_commands_update": "commands",
    "current_mode_update": "mode",
    "config_option_update": "config",
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
    # tool_call / tool_call_update
    tool_kind: str | None = None
    locations: list[Location] | None = None
    content: list[ToolContent] | None = None
    terminal: TerminalMeta | None = None
    # plan, config, usage
    plan: list[PlanEntry] | None = None
    config_options: tuple[ConfigOption, ...] | None = None
    usage: Usage | None = None


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
        first = kind == "tool_call"
        update.tool_call_id = _str(raw.get("toolCallId"))
        update.title = _str(raw.get("title"))
        status = _str(raw.get("status"))
        update.status = status if status in TOOL_STATUSES else ("pending" if first else None)
        tool_kind = _str(raw.get("kind"))
        update.tool_kind = tool_kind if tool_kind in TOOL_KINDS else ("other" if first or tool_kind else None)
        update.locations = parse_locations(raw.get("locations"))
        update.content = parse_content(raw.get("content"), content_text)
        update.terminal = parse_terminal_meta(raw.get("_meta"))
    elif kind == "plan":
        update.plan = parse_plan(raw.get("entries"))
    elif kind == "session_info":
        update.title = _str(raw.get("title"))
    elif kind == "mode":
        update.text = _str(raw.get("currentModeId")) or ""
    elif kind == "config":
        update.config_options = parse_config_options(raw.get("configOptions"))
    elif kind == "usage":
        update.usage = parse_usage(raw)
    return update


def normalise_commands(value: Any) -> list[dict[str, Any]]:
    """available_commands_update's list, keeping only well-formed entries."""
    commands = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
            commands.append(
                {"name": item["name"], "description": str(item.get("description") or ""), "input": item.get("input")}
            )
    return commands
