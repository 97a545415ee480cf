"""Conversations (docs/architecture.md "Conversations and threads"): a room's main timeline, or one
Matrix thread in it (MSC3440, `rel_type: m.thread`). Pure: no I/O, tested on its own.

A conversation is named by a string: "" for the main timeline, else the event id of the thread's
root (itself a main-timeline event). This is the `conversation` of a turn record, of a stored
message and of a member's session (store/).

- `conversation_of(content)`: the conversation an incoming event's content belongs to.
- `thread_relation(root, latest)`: the `m.relates_to` of what the bridge sends into a thread,
  with the reply fallback for clients without threads (`is_falling_back`, `m.in_reply_to`).
- `Here`: where an owner's message was typed (its conversation and event), for the replies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAIN = ""  # the room's main timeline
THREAD = "m.thread"


def conversation_of(content: dict[str, Any]) -> str:
    """The thread root an event's content says it is in, else MAIN. A reply without
    `rel_type: m.thread` (a client without threads) is in the main timeline. An edit
    (`m.replace`) says nothing of its own: it stays where its original is, which its content
    does not tell (MAIN here; the bridge takes no edit as a new message)."""
    relates = content.get("m.relates_to") if isinstance(content, dict) else None
    if not isinstance(relates, dict) or relates.get("rel_type") != THREAD:
        return MAIN
    root = relates.get("event_id")
    return root if isinstance(root, str) and root.startswith("$") else MAIN


def is_thread(conversation: str) -> bool:
    return conversation != MAIN


def thread_relation(root: str, latest: str | None = None) -> dict[str, Any]:
    """The `m.relates_to` of a new message in the thread of `root`. Clients without threads see
    a reply to `latest` (the message it follows: for a turn, the one it answers), or to the root;
    clients with threads know by `is_falling_back` that it is no real reply. An edit never
    carries this: its `m.relates_to` is its `m.replace` alone, and its `m.new_content` has none
    (an edit stays in its original's thread)."""
    reply_to = latest if isinstance(latest, str) and latest.startswith("$") else root
    return {"rel_type": THREAD, "event_id": root, "is_falling_back": True, "m.in_reply_to": {"event_id": reply_to}}


def relation_for(conversation: str, latest: str | None = None) -> dict[str, Any] | None:
    """What a message sent into `conversation` relates to: None in the main timeline."""
    return thread_relation(conversation, latest) if is_thread(conversation) else None


@dataclass(frozen=True)
class Here:
    """Where an owner's message was typed: its conversation and its event. What the bridge says
    back to it (a command's reply) goes there: in a thread, with the reply fallback to it."""

    conversation: str = MAIN
    event_id: str | None = None

    @classmethod
    def of(cls, event: dict[str, Any]) -> Here:
        """Where `event` (an owner's message) was typed."""
        event_id = event.get("event_id")
        return cls(conversation_of(event.get("content") or {}), event_id if isinstance(event_id, str) else None)

    @property
    def relates_to(self) -> dict[str, Any] | None:
        return relation_for(self.conversation, self.event_id)
