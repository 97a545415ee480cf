"""Channels: a Matrix room the bridge serves, under an id of its own (`sk_channel`). Deleting
or moving one takes what hangs on it in every table, in one transaction."""

from __future__ import annotations

from .core import Part, operation
from .ids import new_id, now_ms
from .records import Channel


class Channels(Part):
    def _select(self, where=None) -> list[Channel]:
        C = self.core.models.Channel
        query = C.select(*_columns(C))
        if where is not None:
            query = query.where(where)
        return [Channel(*row) for row in query.order_by(C.id).tuples()]

    @operation
    def require(self, channel_id: str) -> None:
        """LookupError unless the channel exists."""
        if not self.core.queries.channel_exists.rows(id=channel_id):
            raise LookupError(f"no channel {channel_id}")

    @operation
    def create_channel(self, room_id: str, name: str, direct_agent: str | None = None) -> Channel:
        C = self.core.models.Channel
        existing = self._select(C.room_id == room_id)
        if existing and self.core.retrying:
            return existing[0]  # the first try was written before the connection went
        if existing:
            raise ValueError(f"room {room_id} already has a channel")
        channel = Channel(new_id(), room_id, name, direct_agent, now_ms())
        C.insert(
            id=channel.id, room_id=room_id, name=name, direct_agent=direct_agent, created=channel.created
        ).execute()
        return channel

    @operation
    def channel_by_room(self, room_id: str) -> Channel | None:
        return self._one("room_id", room_id)

    @operation
    def channel(self, channel_id: str) -> Channel | None:
        return self._one("id", channel_id)

    def _one(self, column: str, value: str) -> Channel | None:
        """The channel whose `column` is `value`: its SQL written once (compiled.py) — an ACP
        client's every request finds its conversation so."""
        C = self.core.models.Channel
        query = self.core.compiled(
            ("channel by", column),
            lambda value: C.select(*_columns(C)).where(getattr(C, column) == value),
            "value",
        )
        found = query.rows(value=value)
        return Channel(*found[0]) if found else None

    @operation
    def channels(self) -> list[Channel]:
        return self._select()

    @operation
    def rename_channel(self, channel_id: str, name: str) -> None:
        C = self.core.models.Channel
        C.update(name=name).where(C.id == channel_id).execute()

    @operation
    def move_channel(self, channel_id: str, room_id: str) -> Channel:
        """The channel now lives in `room_id` (its room was upgraded: m.room.tombstone). Its
        members, sessions, history and settings hang on its id and go with it. A channel already
        in `room_id` without history (an invite came before the tombstone) makes way; one with
        history raises ValueError."""
        m = self.core.models
        with self.core.db.atomic():
            self.require(channel_id)
            for other in self._select(m.Channel.room_id == room_id):
                if other.id == channel_id:
                    continue
                if m.Message.select().where(m.Message.channel_id == other.id).exists():
                    raise ValueError(f"room {room_id} already has a channel with history")
                self._delete(other.id, (m.Member, m.ThreadSession, m.Session, m.Turn, m.Channel))
            m.Channel.update(room_id=room_id).where(m.Channel.id == channel_id).execute()
            return self._select(m.Channel.id == channel_id)[0]

    @operation
    def delete_channel(self, channel_id: str) -> None:
        m = self.core.models
        with self.core.db.atomic():
            self._delete(
                channel_id,
                (
                    m.MessageEvent,
                    m.Message,
                    m.Member,
                    m.ThreadSession,
                    m.Session,
                    m.Turn,
                    m.Schedule,
                    m.WorkDir,
                    m.Worktree,
                    m.Channel,
                ),
            )

    def _delete(self, channel_id: str, tables) -> None:
        """The channel's rows of `tables`, in that order (children before their parents)."""
        for table in tables:
            key = table.id if table is self.core.models.Channel else table.channel_id
            table.delete().where(key == channel_id).execute()


def _columns(C) -> tuple:
    """A channel's columns, in the order `Channel` takes them."""
    return (C.id, C.room_id, C.name, C.direct_agent, C.created)
