"""The hot paths' queries, compiled once per store (see compiled.py)."""

from types import SimpleNamespace

import peewee as pw

from .compiled import Compiled

MESSAGE_FIELDS = ("id", "channel_id", "sender", "role", "text", "event_ids", "created")


def hot_queries(db: pw.Database, m: SimpleNamespace) -> SimpleNamespace:
    C, M, E = m.Channel, m.Message, m.MessageEvent
    columns = [getattr(M, name) for name in MESSAGE_FIELDS]

    def newest_first(where):
        # Through the (channel_id, id) key backwards: the cost depends on the
        # limit, not on the history's length.
        return M.select(*columns).where(where).order_by(M.id.desc())

    return SimpleNamespace(
        channel_exists=Compiled(db, lambda id: C.select(C.id).where(C.id == id), "id"),
        insert_message=Compiled(db, lambda **row: M.insert(**row), *MESSAGE_FIELDS),
        insert_event=Compiled(
            db,
            lambda **row: E.insert(**row),
            "event_id",
            "channel_id",
            "message_id",
        ),
        set_last_agent=Compiled(
            db,
            lambda id, agent: C.update(last_agent=agent).where(C.id == id),
            "id",
            "agent",
        ),
        last=Compiled(
            db,
            lambda channel_id, limit: newest_first(M.channel_id == channel_id).limit(limit),
            "channel_id",
            "limit",
        ),
        after=Compiled(
            db,
            lambda channel_id, after, limit: newest_first((M.channel_id == channel_id) & (M.id > after)).limit(limit),
            "channel_id",
            "after",
            "limit",
        ),
        by_event=Compiled(
            db,
            lambda event_id: M.select(*columns)
            .join(E, on=(E.channel_id == M.channel_id) & (E.message_id == M.id))
            .where(E.event_id == event_id)
            .order_by(M.id.desc())
            .limit(1),
            "event_id",
        ),
        last_agent_sender=Compiled(db, lambda id: C.select(C.last_agent).where(C.id == id), "id"),
    )
