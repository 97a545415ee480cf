"""The hot paths' queries, compiled once per store (see compiled.py)."""

from types import SimpleNamespace

import peewee as pw

from .compiled import Compiled
from .records import TURN_COLUMNS
from .schema import select
from .turn_states import LIVE as LIVE_TURN_STATES

MESSAGE_FIELDS = ("id", "channel_id", "sender", "role", "text", "event_ids", "created", "conversation")
MEMBER_FIELDS = ("channel_id", "agent", "session_id", "fresh", "last_seen", "session_cwd")


def hot_queries(db: pw.Database, m: SimpleNamespace) -> SimpleNamespace:
    C, M, E, T, V = m.Channel, m.Message, m.MessageEvent, m.Txn, m.Value
    R, S, U = m.Member, m.ThreadSession, m.Turn
    columns = [getattr(M, name) for name in MESSAGE_FIELDS]
    member_columns = [getattr(R, name) for name in MEMBER_FIELDS]

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
        # one conversation's messages (the main timeline's, or a thread's own), through the
        # (channel_id, conversation, id) index backwards
        conv_last=Compiled(
            db,
            lambda channel_id, conversation, limit: newest_first(
                (M.channel_id == channel_id) & (M.conversation == conversation)
            ).limit(limit),
            "channel_id",
            "conversation",
            "limit",
        ),
        conv_after=Compiled(
            db,
            lambda channel_id, conversation, after, limit: newest_first(
                (M.channel_id == channel_id) & (M.conversation == conversation) & (M.id > after)
            ).limit(limit),
            "channel_id",
            "conversation",
            "after",
            "limit",
        ),
        conv_upto=Compiled(
            db,
            lambda channel_id, conversation, upto, limit: newest_first(
                (M.channel_id == channel_id) & (M.conversation == conversation) & (M.id <= upto)
            ).limit(limit),
            "channel_id",
            "conversation",
            "upto",
            "limit",
        ),
        conv_last_agent=Compiled(
            db,
            lambda channel_id, conversation, role: (
                M.select(M.sender)
                .where((M.channel_id == channel_id) & (M.conversation == conversation) & (M.role == role))
                .order_by(M.id.desc())
                .limit(1)
            ),
            "channel_id",
            "conversation",
            "role",
        ),
        thread_member=Compiled(
            db,
            lambda channel_id, agent, conversation: S.select(S.session_id, S.fresh, S.last_seen, S.session_cwd).where(
                (S.channel_id == channel_id) & (S.agent == agent) & (S.conversation == conversation)
            ),
            "channel_id",
            "agent",
            "conversation",
        ),
        by_event=Compiled(
            db,
            lambda event_id: (
                M.select(*columns)
                .join(E, on=(E.channel_id == M.channel_id) & (E.message_id == M.id))
                .where(E.event_id == event_id)
                .order_by(M.id.desc())
                .limit(1)
            ),
            "event_id",
        ),
        last_agent_sender=Compiled(db, lambda id: C.select(C.last_agent).where(C.id == id), "id"),
        # every transaction, every message and every turn: SQL building would be most of the cost
        txn_seen=Compiled(db, lambda id: T.select(T.id).where(T.id == id).limit(1), "id"),
        mark_txn=Compiled(db, lambda id, seen: T.insert(id=id, seen=seen).on_conflict_ignore(), "id", "seen"),
        prune_txns=Compiled(db, lambda before: T.delete().where(T.seen < before), "before"),
        members=Compiled(
            db,
            lambda channel_id: R.select(*member_columns).where(R.channel_id == channel_id).order_by(R.joined),
            "channel_id",
        ),
        member=Compiled(
            db,
            lambda channel_id, agent: R.select(*member_columns).where(
                (R.channel_id == channel_id) & (R.agent == agent)
            ),
            "channel_id",
            "agent",
        ),
        mark_seen=Compiled(
            db,
            lambda channel_id, agent, last_seen: R.update(last_seen=last_seen, fresh=False).where(
                (R.channel_id == channel_id) & (R.agent == agent)
            ),
            "channel_id",
            "agent",
            "last_seen",
        ),
        get_value=Compiled(db, lambda key: V.select(V.value).where(V.key == key), "key"),
        # a turn by its id, and the conversation's newest live turn's agent (routing's last
        # speaker): read for every owner message before its prompt
        turn=Compiled(db, lambda id: select(U, TURN_COLUMNS).where(U.id == id), "id"),
        last_live_agent=Compiled(
            db,
            lambda channel_id, conversation: (
                U.select(U.agent)
                .where(
                    (U.channel_id == channel_id)
                    & (U.conversation == conversation)
                    & U.state.in_(list(LIVE_TURN_STATES))
                    & (U.agent != "")
                )
                .order_by(U.id.desc())
                .limit(1)
            ),
            "channel_id",
            "conversation",
        ),
    )
