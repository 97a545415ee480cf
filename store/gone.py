"""Sessions whose member or thread is gone (store/sessions.py, store/members.py): kept as GONE, in
no conversation but still known as their channel's, so that no other room lists them as another
client's (bridge/channels/turns/sessions.py `merged`)."""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace

from .ids import now_ms

GONE = "(gone)"  # the conversation of such a session (never an event id, never "")


def retire(models: SimpleNamespace, channel_id: str, sessions: Iterable[tuple[str, str]]) -> None:
    """These (agent, session id) of the channel are GONE, recorded so if they were not; in the
    caller's transaction."""
    S, now = models.Session, now_ms()
    for agent, session_id in sessions:
        where = (S.channel_id == channel_id) & (S.agent == agent) & (S.session_id == session_id)
        if not S.update(conversation=GONE).where(where).execute():
            S.insert(
                channel_id=channel_id, agent=agent, conversation=GONE, session_id=session_id, created=now, used=now
            ).execute()
