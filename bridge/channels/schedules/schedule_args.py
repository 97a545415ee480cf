"""A schedule's arguments as an agent (the MCP tools, bridge/mcp/tools.py) and the owner
(`!unschedule N`) give them, and a stored time as both are shown. Pure, and imports nothing
heavy: the `sidekicks mcp` process (mcp/stdio.py) reads it at every start.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

MAX_IN_SECONDS = 366 * 24 * 3600


class BadArguments(ValueError):
    """What is wrong with a call's arguments, in one line for the agent."""


def schedule_number(value: Any) -> int:
    """A schedule's id as the agent or the owner gives it: 3, "3", "#3"."""
    if isinstance(value, str):
        value = value.strip().lstrip("#")
        if value.isdigit():
            value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadArguments("`id` must be a schedule's id, a whole number (see `schedules`)")
    return value


def clock(ms: int, tz: tzinfo | None = None) -> str:
    """A stored time (ms) as the tools show it: 2026-12-05 07:30:15 +0000 (the bridge's zone)."""
    when = datetime.fromtimestamp(ms / 1000, tz or UTC)
    if tz is None:
        when = when.astimezone()
    return when.strftime("%Y-%m-%d %H:%M:%S %z")
