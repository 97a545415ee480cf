"""An owner's message as a turn reads it, once it is stored (portal.py queues it, turns.py
answers it, recovery.py and scheduler.py make it again after a restart)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Incoming:
    """An owner's message, already stored."""

    message_id: str | None
    event_id: str
    body: str
    formatted_body: str | None = None
    mention_ids: list[str] = field(default_factory=list)
    resumed: bool = False  # taken by an earlier run, read back from the store
    attachment: Any = None  # a media.Attachment the owner sent (its caption is `body`)
    sender: str | None = None  # the owner who sent it (who answers its asks); None: a scheduled run
    # the send of the event that shows it in the room, still under way (a prompt from an attached
    # ACP client, taken under its key while its quote is sent): the turn's own events wait for it
    shown: Any = None
