"""The bridge's own record of sessions: each member's sessions per conversation of a channel.

A member has one current session per conversation (sk_member, sk_thread_session); this keeps
every session it had there — opened, loaded, resumed or forked — with a title and when it was
last used, so that `!sessions` can list them and `!resume N` go back to one when the agent
cannot list its sessions itself (ACP session/list). The title is the agent's
(session_info_update) when it gave one, else the first prompt's first line as the caller
shortened it. Rows go with the channel. When the membership goes (the agent left or was
kicked) or the owner deletes a thread, its sessions are kept as GONE: in no conversation, but
still known as that channel's, so that no other room lists them as another client's
(bridge/channels/turns/sessions.py `merged`) — an agent added again gets new ones.
"""

from __future__ import annotations

from .core import Part, operation
from .gone import GONE, retire
from .ids import now_ms
from .records import SessionRecord
from .schema import select

COLUMNS = ("channel_id", "agent", "conversation", "session_id", "title", "created", "used")


def _records(query) -> list[SessionRecord]:
    return [
        SessionRecord(channel_id, agent, conversation, session_id, title, int(created), int(used))
        for channel_id, agent, conversation, session_id, title, created, used in query.tuples()
    ]


class Sessions(Part):
    def _select(self, where):
        return select(self.core.models.Session, COLUMNS).where(where)

    @operation
    def used(
        self,
        channel_id: str,
        agent: str,
        conversation: str,
        session_id: str,
        title: str | None = None,
        first_line: str | None = None,
    ) -> None:
        """The session is used now in `conversation` (recorded if new). `title`: the agent's,
        kept over any other; `first_line`: the title of a session that has none yet."""
        S, now = self.core.models.Session, now_ms()
        with self.core.db.atomic():
            where = (S.channel_id == channel_id) & (S.agent == agent) & (S.session_id == session_id)
            row = S.select(S.title).where(where).tuples().first()
            if row is None:
                S.insert(
                    channel_id=channel_id,
                    agent=agent,
                    conversation=conversation,
                    session_id=session_id,
                    title=title or first_line,
                    created=now,
                    used=now,
                ).execute()
                return
            values = {S.used: now, S.conversation: conversation}
            if title:
                values[S.title] = title
            elif row[0] is None and first_line:
                values[S.title] = first_line
            S.update(values).where(where).execute()

    @operation
    def listed(self, channel_id: str, agent: str, conversation: str) -> list[SessionRecord]:
        """The member's sessions in `conversation`, the last used first."""
        S = self.core.models.Session
        where = (S.channel_id == channel_id) & (S.agent == agent) & (S.conversation == conversation)
        return _records(self._select(where).order_by(S.used.desc(), S.created.desc()))

    @operation
    def of_channel(self, channel_id: str, conversation: str | None = None) -> list[SessionRecord]:
        """Every member's sessions in the channel (in one conversation, if given)."""
        S = self.core.models.Session
        where = S.channel_id == channel_id
        where &= (S.conversation == conversation) if conversation is not None else (S.conversation != GONE)
        return _records(self._select(where).order_by(S.agent, S.used.desc()))

    @operation
    def of_agent(self, agent: str) -> list[SessionRecord]:
        """The agent's recorded sessions in every channel and conversation, those GONE too."""
        S = self.core.models.Session
        return _records(self._select(S.agent == agent).order_by(S.used.desc()))

    @operation
    def forget(self, channel_id: str, conversation: str) -> list[SessionRecord]:
        """A thread is gone: its sessions' records and the members' sessions there are forgotten;
        the records as they were."""
        T = self.core.models.ThreadSession
        with self.core.db.atomic():
            found = self.of_channel(channel_id, conversation)
            current = (
                T.select(T.agent, T.session_id)
                .where((T.channel_id == channel_id) & (T.conversation == conversation) & T.session_id.is_null(False))
                .tuples()
            )
            recorded = {(r.agent, r.session_id) for r in found}
            found += [
                SessionRecord(channel_id, agent, conversation, session_id, None, 0, 0)
                for agent, session_id in current
                if (agent, session_id) not in recorded
            ]
            retire(self.core.models, channel_id, [(r.agent, r.session_id) for r in found])
            T.delete().where((T.channel_id == channel_id) & (T.conversation == conversation)).execute()
            return found
