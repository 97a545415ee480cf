"""Members: an agent in a channel, with its session in the main timeline (`sk_member`) and in
each thread it has had a turn in (`sk_thread_session`)."""

from __future__ import annotations

from .channels import Channels
from .core import Core, Part, operation
from .gone import retire
from .ids import new_id, now_ms
from .records import Member


def to_members(rows: list[tuple]) -> list[Member]:
    """Members from rows of queries.MEMBER_FIELDS."""
    return [
        Member(channel_id, agent, session_id, bool(fresh), last_seen, session_cwd)
        for channel_id, agent, session_id, fresh, last_seen, session_cwd in rows
    ]


class Members(Part):
    def __init__(self, core: Core, channels: Channels) -> None:
        super().__init__(core)
        self.channels = channels

    def _update(self, channel_id: str, agent: str, **values) -> None:
        # A member removed meanwhile (an answer ending late) is not an error.
        M = self.core.models.Member
        M.update(**values).where((M.channel_id == channel_id) & (M.agent == agent)).execute()

    @operation
    def add_member(self, channel_id: str, agent: str) -> Member:
        with self.core.db.atomic():
            self.channels.require(channel_id)
            M = self.core.models.Member
            M.insert(channel_id=channel_id, agent=agent, fresh=False, joined=new_id()).on_conflict_ignore().execute()
            member = self.member(channel_id, agent)
            assert member is not None  # written just now (or there already), in this transaction
            return member

    @operation
    def remove_member(self, channel_id: str, agent: str) -> None:
        """The agent leaves the channel: its rows go, its sessions there are kept GONE (gone.py)."""
        m = self.core.models
        with self.core.db.atomic():
            S, T, M = m.Session, m.ThreadSession, m.Member
            recorded = S.select(S.session_id).where((S.channel_id == channel_id) & (S.agent == agent))
            current = [
                *T.select(T.session_id).where((T.channel_id == channel_id) & (T.agent == agent)).tuples(),
                *M.select(M.session_id).where((M.channel_id == channel_id) & (M.agent == agent)).tuples(),
            ]
            sessions = {session_id for (session_id,) in [*recorded.tuples(), *current] if session_id}
            retire(m, channel_id, [(agent, session_id) for session_id in sorted(sessions)])
            for table in (T, M):
                table.delete().where((table.channel_id == channel_id) & (table.agent == agent)).execute()

    @operation
    def members(self, channel_id: str) -> list[Member]:
        return to_members(self.core.queries.members.rows(channel_id=channel_id))

    @operation
    def member(self, channel_id: str, agent: str, conversation: str = "") -> Member | None:
        """The member, with its session in `conversation` ("" the main timeline, else a thread:
        no session, not fresh, nothing seen before its first turn there). None if not a member."""
        queries = self.core.queries
        found = to_members(queries.member.rows(channel_id=channel_id, agent=agent))
        if not found or not conversation:
            return found[0] if found else None
        # a member's session in a thread: its own row, none before its first turn there
        rows = queries.thread_member.rows(channel_id=channel_id, agent=agent, conversation=conversation)
        session_id, fresh, last_seen, cwd = rows[0] if rows else (None, False, None, None)
        return Member(channel_id, agent, session_id, bool(fresh), last_seen, cwd, conversation)

    @operation
    def set_session(
        self,
        channel_id: str,
        agent: str,
        session_id: str | None,
        fresh: bool,
        cwd: str | None = None,
        conversation: str = "",
    ) -> None:
        """The member's session in `conversation` (None: none), and the working directory it was
        opened in."""
        if not conversation:
            self._update(channel_id, agent, session_id=session_id, fresh=bool(fresh), session_cwd=cwd)
            return
        S = self.core.models.ThreadSession
        S.insert(
            channel_id=channel_id,
            agent=agent,
            conversation=conversation,
            session_id=session_id,
            fresh=bool(fresh),
            session_cwd=cwd,
            updated=now_ms(),
        ).on_conflict(
            conflict_target=[S.channel_id, S.agent, S.conversation],
            update={S.session_id: session_id, S.fresh: bool(fresh), S.session_cwd: cwd, S.updated: now_ms()},
        ).execute()

    @operation
    def set_fresh(self, channel_id: str, agent: str, fresh: bool) -> None:
        self._update(channel_id, agent, fresh=bool(fresh))

    @operation
    def set_last_seen(self, channel_id: str, agent: str, message_id: str) -> None:
        self._update(channel_id, agent, last_seen=message_id)

    @operation
    def mark_seen(self, channel_id: str, agent: str, message_id: str, conversation: str = "") -> None:
        """After a turn: seen up to `message_id` in `conversation`, and its session is no longer fresh."""
        if not conversation:
            self.core.queries.mark_seen.run(channel_id=channel_id, agent=agent, last_seen=message_id)
            return
        S = self.core.models.ThreadSession
        S.update(last_seen=message_id, fresh=False, updated=now_ms()).where(
            (S.channel_id == channel_id) & (S.agent == agent) & (S.conversation == conversation)
        ).execute()

    @operation
    def members_of_agent(self, agent: str) -> list[Member]:
        M = self.core.models.Member
        query = M.select(M.channel_id, M.agent, M.session_id, M.fresh, M.last_seen, M.session_cwd)
        return to_members(query.where(M.agent == agent).order_by(M.joined).tuples())
