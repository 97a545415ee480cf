"""How the bridge names a room in what it tells the owner ("answering in …"). Pure.

A direct channel is the owner's direct chat with the agent — its store name is the agent's name,
a channel the owner never made, so it is never shown as `#local`. A channel is `#name`, the name
the room has (renames follow); a room that never had a name is said to be one.
"""

from __future__ import annotations

from typing import Any


def place(name: str | None, direct_agent: str | None) -> str:
    """Where something happens, as words after "in": `your direct chat`, `#general`."""
    if direct_agent is not None:
        return "your direct chat"
    name = (name or "").strip().lstrip("#")
    if not name or name.startswith("!"):  # made by an invite to a room without a name: its id
        return "a room without a name"
    return f"#{name}"


def place_of(channel: Any) -> str:
    """`place` of a store Channel (its `name` and `direct_agent`)."""
    return place(channel.name, channel.direct_agent)
