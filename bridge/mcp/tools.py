"""The `matrix` MCP server's tools: names, descriptions, argument schemas and checking, and how
results read. Pure: no Matrix, no store (tests/unit/mcp/test_mcp_tools.py).

Every tool acts on the conversation of the session that calls it, never another; its result is
text. A call with bad arguments gets an error result saying what is wrong, never a traceback.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timezone
from typing import Any

# what the owner's commands and these tools share (pure, channels/schedules/schedule_args.py)
from ..channels.schedules.schedule_args import MAX_IN_SECONDS, BadArguments, clock, schedule_number  # noqa: F401
from ..channels.turns.context import context_line

SERVER_NAME = "matrix"
HISTORY_DEFAULT = 20  # messages `history` returns when no limit is given
HISTORY_CHARS = 2000  # each message's text is cut here
HISTORY_TOTAL = 40_000  # characters of one `history` result at most (the oldest lines go first)
PROMPT_CHARS = 4000  # a scheduled prompt at most
KEY_CHARS = 64  # a reaction key at most
AGENT_CHARS = 100  # an agent's name at most


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]


TOOLS: tuple[Tool, ...] = (
    Tool(
        "history",
        "The messages of this Matrix conversation, as stored by the bridge, newest last: "
        "time, sender, text. `query` keeps only messages containing it (case does not matter).",
        {
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "minimum": 1, "description": "how many messages (default 20)"},
                "query": {"type": "string", "description": "only messages containing this text"},
            },
        },
    ),
    Tool(
        "send_file",
        "Post a file from your working directory in this conversation (encrypted where the "
        "room is). Only regular files under your working directory, up to the attachment "
        "size limit.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file, absolute or relative to your working directory"},
                "caption": {"type": "string", "description": "a line posted with it"},
            },
            "required": ["path"],
        },
    ),
    Tool(
        "react",
        "React to a message of this conversation with an emoji or short text.",
        {
            "type": "object",
            "properties": {
                "event_id": {"type": "string", "description": "the Matrix event id of the message ($…)"},
                "key": {"type": "string", "description": "the reaction, e.g. 👍"},
            },
            "required": ["event_id", "key"],
        },
    ),
    Tool(
        "schedule",
        "Run `prompt` later as a turn of yours in this conversation: once after `in_seconds`, "
        "once at `at` (ISO 8601; without an offset, the bridge's local time), or repeatedly on "
        "`cron` (5 fields, the bridge's local time). Give exactly one of the three. Returns "
        "the schedule's id. A single run is shown to the owner, who can cancel it; a repeating "
        "one runs only once the owner approves it in the room (`schedules` says whether they "
        "did). When it runs you are told it is your scheduled run, not the owner's message.",
        {
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "description": "what you will be told when it runs"},
                "in_seconds": {"type": "number", "minimum": 1},
                "at": {"type": "string", "description": "e.g. 2026-12-05T09:00:00+01:00"},
                "cron": {"type": "string", "description": "e.g. 0 9 * * 1-5"},
            },
            "required": ["prompt"],
        },
    ),
    Tool(
        "schedules",
        "Your schedules in this conversation: id, when it runs next (or that it waits for "
        "the owner's approval, or was declined), prompt.",
        {"type": "object", "properties": {}},
    ),
    Tool(
        "cancel_schedule",
        "Cancel one of your schedules in this conversation by its id.",
        {"type": "object", "properties": {"id": {"type": ["integer", "string"]}}, "required": ["id"]},
    ),
)
TOOLS += (
    Tool(
        "handoff",
        "Hand the next turn of this conversation to another member of the channel: once your "
        "turn ends, `agent` answers next here, told your request (and what it has not seen). "
        "Use it when another agent should take over; mentioning an agent in your answer wakes "
        "no one. One hand-off per turn; a chain started by one owner message has at most "
        "limits.handoffs of them.",
        {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "the member's name, e.g. bob"},
                "request": {"type": "string", "description": "what you ask of it, in your words"},
            },
            "required": ["agent", "request"],
        },
    ),
)
NAMES = tuple(tool.name for tool in TOOLS)


def _text(args: dict[str, Any], key: str, required: bool, most: int | None = None) -> str | None:
    value = args.get(key)
    if value is None:
        if required:
            raise BadArguments(f"`{key}` is required")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadArguments(f"`{key}` must be a non-empty string")
    if most is not None and len(value) > most:
        raise BadArguments(f"`{key}` is {len(value)} characters, more than {most}")
    return value


def check(name: str, args: Any, history_most: int) -> dict[str, Any]:
    """The call's arguments, checked and normalised; BadArguments saying what is wrong."""
    if name not in NAMES:
        raise BadArguments(f"there is no tool {name!r}; the tools are {', '.join(NAMES)}")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise BadArguments("the arguments must be an object")
    known = set(next(t for t in TOOLS if t.name == name).schema["properties"])
    unknown = sorted(str(k) for k in args if k not in known)
    if unknown:
        raise BadArguments(f"unknown argument {unknown[0]!r} (known: {', '.join(sorted(known)) or 'none'})")
    if name == "history":
        limit = args.get("limit", HISTORY_DEFAULT)
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise BadArguments("`limit` must be a whole number of at least 1")
        return {"limit": min(limit, history_most), "query": _text(args, "query", False, 500)}
    if name == "send_file":
        return {"path": _text(args, "path", True, 4096), "caption": _text(args, "caption", False, 4000)}
    if name == "react":
        event_id = _text(args, "event_id", True, 255)
        if event_id is None or not event_id.startswith("$"):
            raise BadArguments("`event_id` must be a Matrix event id, starting with $")
        return {"event_id": event_id, "key": _text(args, "key", True, KEY_CHARS)}
    if name == "schedule":
        prompt = _text(args, "prompt", True, PROMPT_CHARS)
        given = [k for k in ("in_seconds", "at", "cron") if args.get(k) is not None]
        if len(given) != 1:
            raise BadArguments("give exactly one of `in_seconds`, `at` or `cron`")
        when = given[0]
        if when == "in_seconds":
            seconds = args["in_seconds"]
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, (int, float))
                or not math.isfinite(seconds)
                or not 1 <= seconds <= MAX_IN_SECONDS
            ):
                raise BadArguments(f"`in_seconds` must be a number from 1 to {MAX_IN_SECONDS}")
            return {"prompt": prompt, "in_seconds": float(seconds)}
        return {"prompt": prompt, when: _text(args, when, True, 200)}
    if name == "handoff":
        agent = _text(args, "agent", True, AGENT_CHARS) or ""
        return {"agent": agent.strip().lstrip("@").lower(), "request": _text(args, "request", True, PROMPT_CHARS)}
    if name == "cancel_schedule":
        return {"id": schedule_number(args.get("id"))}
    return {}


def history_text(lines: list[tuple[int, str, str]], query: str | None, tz: timezone | None = None) -> str:
    """`history`'s result: (time ms, sender, text) oldest first → one line each, newest last, each
    text cut at HISTORY_CHARS, the oldest dropped past HISTORY_TOTAL."""
    if not lines:
        return f"No stored message contains {query!r}." if query else "No messages are stored yet."
    shown: list[str] = []
    total = 0
    for ms, sender, text in reversed(lines):
        if len(text) > HISTORY_CHARS:
            text = text[:HISTORY_CHARS] + "… [cut]"
        line = f"[{clock(ms, tz)}] {context_line(sender, text)}"  # no line of it reads as another's
        if total + len(line) > HISTORY_TOTAL and shown:
            break
        shown.append(line)
        total += len(line) + 1
    return "\n".join(reversed(shown))


def matches(text: str, query: str | None) -> bool:
    return query is None or query.casefold() in text.casefold()
