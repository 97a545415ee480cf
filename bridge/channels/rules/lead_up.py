"""What a thread's fresh session is told first: the main timeline's messages that led to the
thread's root, then the thread's own (docs/using.md "Threads"). Pure: no store, no Matrix
(tests/unit/channels/rules/test_lead_up.py).

A thread started on an agent's answer would otherwise begin with that answer alone, as a
message the agent never saw asked; with what led to it, the agent knows the question it answered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


M = TypeVar("M", bound=_HasId)


def with_lead_up(lead: Sequence[M], thread: Sequence[M], limit: int) -> list[M]:
    """The last `limit` of: `lead` (the main timeline up to and including the root, oldest
    first), then `thread` (the thread's messages, oldest first; its root, if there, once)."""
    if limit <= 0:
        return []
    known = {message.id for message in lead}
    merged = [*lead, *(message for message in thread if message.id not in known)]
    return merged[-limit:]
