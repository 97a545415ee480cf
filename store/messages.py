"""Finished messages: what the owner and the agents said in a channel (`sk_message`), with the
Matrix events that carry each (`sk_message_event`), in the main timeline or a thread."""

from __future__ import annotations

import json
from collections.abc import Sequence

import peewee as pw

from .channels import Channels
from .core import Core, Part, operation
from .ids import new_id, now_ms
from .records import Message

ROLES = ("user", "agent")
TEXT_PAGE = 100  # messages `recent_texts` reads at a time


def to_messages(rows: list[tuple]) -> list[Message]:
    """Messages from rows of queries.MESSAGE_FIELDS, newest first: in chronological order."""
    found = [
        Message(id, channel_id, sender, role, text, tuple(json.loads(event_ids)), created, conversation or "")
        for id, channel_id, sender, role, text, event_ids, created, conversation in rows
    ]
    found.reverse()
    return found


class Messages(Part):
    def __init__(self, core: Core, channels: Channels) -> None:
        super().__init__(core)
        self.channels = channels

    @operation
    def add_message(
        self,
        channel_id: str,
        sender: str,
        role: str,
        text: str,
        event_ids: Sequence[str] = (),
        conversation: str = "",
    ) -> Message:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        if isinstance(event_ids, str):
            raise TypeError("event_ids must be a sequence of event ids, not one string")
        queries = self.core.queries
        if self.core.retrying and event_ids:
            # the first try may have been written before the connection went: not twice
            for found in to_messages(queries.by_event.rows(event_id=event_ids[0])):
                if found.channel_id == channel_id and found.text == text and found.role == role:
                    return found
        message = Message(new_id(), channel_id, sender, role, text, tuple(event_ids), now_ms(), conversation)
        with self.core.db.atomic():
            self.channels.require(channel_id)
            queries.insert_message.run(
                id=message.id,
                channel_id=channel_id,
                sender=sender,
                role=role,
                text=text,
                event_ids=json.dumps(message.event_ids),
                created=message.created,
                conversation=conversation,
            )
            for event_id in message.event_ids:
                queries.insert_event.run(event_id=event_id, channel_id=channel_id, message_id=message.id)
            if role == "agent" and not conversation:  # the main timeline's last speaker
                queries.set_last_agent.run(id=channel_id, agent=sender)
        return message

    @operation
    def add_event(self, channel_id: str, message_id: str, event_id: str) -> None:
        """One more Matrix event that carries a stored message (a prompt stored under its key
        before the event that shows it was sent: bridge/attach/service.py)."""
        m = self.core.models
        with self.core.db.atomic():
            row = m.Message.get_or_none((m.Message.channel_id == channel_id) & (m.Message.id == message_id))
            if row is None or event_id in json.loads(row.event_ids):
                return
            events = json.dumps([*json.loads(row.event_ids), event_id])
            m.Message.update(event_ids=events).where(
                (m.Message.channel_id == channel_id) & (m.Message.id == message_id)
            ).execute()
            self.core.queries.insert_event.run(event_id=event_id, channel_id=channel_id, message_id=message_id)

    @operation
    def messages_after(self, channel_id: str, after_id: str | None, limit: int) -> list[Message]:
        if limit <= 0:
            return []
        if after_id is None:
            return self.last_messages(channel_id, limit)
        return to_messages(self.core.queries.after.rows(channel_id=channel_id, after=after_id, limit=limit))

    @operation
    def messages_in(self, channel_id: str, conversation: str, after_id: str | None, limit: int) -> list[Message]:
        """The last `limit` messages of one conversation after `after_id` (None: from the
        start), oldest first: the main timeline's (no thread's), or a thread's — its root (a
        main-timeline message) first, then its own; no main-timeline message after the root."""
        if limit <= 0:
            return []
        queries = self.core.queries
        if after_id is None:
            rows = queries.conv_last.rows(channel_id=channel_id, conversation=conversation, limit=limit)
        else:
            rows = queries.conv_after.rows(
                channel_id=channel_id, conversation=conversation, after=after_id, limit=limit
            )
        found = to_messages(rows)
        if conversation:
            root = self._thread_root(channel_id, conversation)
            if root is not None and (after_id is None or root.id > after_id):
                found = [root, *found][-limit:]
        return found

    @operation
    def conversations(self, channel_id: str) -> list[tuple[str, int, str]]:
        """The channel's conversations that hold a message: (conversation — "" the main
        timeline, else a thread's root —, when its last message was written (ms), the text of
        its first message), the one written to last first (an ACP client's session/list:
        bridge/attach)."""
        M = self.core.models.Message
        rows = (
            M.select(M.conversation, pw.fn.MAX(M.created), pw.fn.MIN(M.id), pw.fn.MAX(M.id))
            .where(M.channel_id == channel_id)
            .group_by(M.conversation)
            .tuples()
        )
        found = []
        for conversation, last, first_id, _last in sorted(rows, key=lambda row: row[3], reverse=True):
            first = M.get_or_none((M.channel_id == channel_id) & (M.id == first_id))  # ids sort by time
            found.append((conversation or "", int(last or 0), first.text if first is not None else ""))
        return found

    @operation
    def lead_up(self, channel_id: str, conversation: str, limit: int) -> list[Message]:
        """What led to a thread (`conversation`, its root's event id): the last `limit` messages
        of the main timeline up to and including its root, oldest first; [] when the root is
        not a stored main-timeline message of this channel."""
        root = self._thread_root(channel_id, conversation) if conversation else None
        if limit <= 0 or root is None or root.conversation:
            return []
        return to_messages(
            self.core.queries.conv_upto.rows(channel_id=channel_id, conversation="", upto=root.id, limit=limit)
        )

    def _thread_root(self, channel_id: str, conversation: str) -> Message | None:
        """The stored message a thread hangs on (None: not stored, or of another channel)."""
        found = self.message_by_event(conversation)
        return found if found is not None and found.channel_id == channel_id else None

    @operation
    def recent_texts(
        self, channel_id: str, conversation: str, most: int, each: int, total: int
    ) -> list[tuple[int, str, str]]:
        """(time, sender, text) of the newest messages of one conversation (a thread's root
        first), oldest first, bounded in bytes: at most `most` of them, each text's first `each`
        characters only (cut by the database), read newest first by pages until `total`
        characters are read (`history`, docs/SECURITY.md "Limits")."""
        M = self.core.models.Message
        found: list[tuple[int, str, str]] = []
        read, before = 0, None
        while len(found) < most and read < total:
            where = (M.channel_id == channel_id) & (M.conversation == conversation)
            if before is not None:
                where &= M.id < before
            page = min(TEXT_PAGE, most - len(found))
            rows = list(
                M.select(M.id, M.created, M.sender, pw.fn.SUBSTR(M.text, 1, each))
                .where(where)
                .order_by(M.id.desc())
                .limit(page)
                .tuples()
            )
            for _, created, sender, text in rows:
                found.append((created, sender, text or ""))
                read += len(text or "")
            if len(rows) < page:
                break
            before = rows[-1][0]
        found.reverse()
        root = self._thread_root(channel_id, conversation) if conversation else None
        if root is not None:
            found.insert(0, (root.created, root.sender, root.text[:each]))
        return found

    @operation
    def last_messages(self, channel_id: str, limit: int) -> list[Message]:
        if limit <= 0:
            return []
        return to_messages(self.core.queries.last.rows(channel_id=channel_id, limit=limit))

    @operation
    def message_by_event(self, event_id: str) -> Message | None:
        found = to_messages(self.core.queries.by_event.rows(event_id=event_id))
        return found[0] if found else None

    @operation
    def delete_message_by_event(self, event_id: str) -> bool:
        """Forget the message carried by `event_id` (all its events); False if none is."""
        message = self.message_by_event(event_id)
        if message is None:
            return False
        m = self.core.models
        with self.core.db.atomic():
            E = m.MessageEvent
            E.delete().where((E.channel_id == message.channel_id) & (E.message_id == message.id)).execute()
            M = m.Message
            M.delete().where((M.channel_id == message.channel_id) & (M.id == message.id)).execute()
        return True

    @operation
    def last_agent_sender(self, channel_id: str, conversation: str = "") -> str | None:
        """The agent of the newest stored answer in `conversation`; in a thread with none yet,
        the agent whose message is its root (the owner answered it in a thread)."""
        queries = self.core.queries
        if not conversation:
            rows = queries.last_agent_sender.rows(id=channel_id)
            return rows[0][0] if rows else None
        rows = queries.conv_last_agent.rows(channel_id=channel_id, conversation=conversation, role="agent")
        if rows:
            return rows[0][0]
        root = self._thread_root(channel_id, conversation)
        return root.sender if root is not None and root.role == "agent" else None

    @operation
    def count_messages(self, channel_id: str | None = None) -> int:
        M = self.core.models.Message
        query = M.select()
        if channel_id is not None:
            query = query.where(M.channel_id == channel_id)
        return query.count()
