"""What the store returns: plain frozen values, never database rows."""

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Channel:
    id: str
    room_id: str
    name: str
    direct_agent: str | None  # set for a direct conversation with one agent
    created: int  # milliseconds since the epoch


@dataclass(frozen=True)
class Member:
    channel_id: str
    agent: str
    session_id: str | None  # the agent's ACP session for this channel
    fresh: bool  # a new session that has not yet been told the channel's past
    last_seen: str | None  # id of the last channel message this agent has seen
    session_cwd: str | None = None  # the working directory its session was opened in
    conversation: str = ""  # "" its session in the main timeline; else in that thread (sk_thread_session)


@dataclass(frozen=True)
class Message:
    id: str
    channel_id: str
    sender: str  # the agent's name, or the user's display name / id
    role: str  # 'user' | 'agent'
    text: str
    event_ids: tuple[str, ...]  # the Matrix events that carry it, in order
    created: int  # milliseconds since the epoch
    conversation: str = ""  # "" the main timeline; else the thread's root event id


@dataclass(frozen=True)
class TurnRecord:
    """One agent answering one prompt in one conversation (store/turns.py)."""

    id: str  # sorts by the time it was taken
    channel_id: str
    conversation: str  # "" the main timeline; a thread's root event id
    prompt_event: str
    agent: str
    message_id: str | None  # the owner message it answers
    text: str  # what the agent is told after its context
    alone: bool  # a slash command, sent without context
    state: str
    run: str | None  # the bridge run that took or claimed it last
    attempt: int  # how many times it was claimed
    answer: tuple[str, ...]  # event ids of the answer's messages so far
    final: dict | None  # the final send in flight: {event, content, txn, text}


TURN_COLUMNS = tuple(f.name for f in fields(TurnRecord))  # sk_turn's columns, in this order


@dataclass(frozen=True)
class ScheduleRecord:
    """Work an agent scheduled for later (store/schedules.py)."""

    id: str
    channel_id: str
    conversation: str
    number: int  # per channel: `!schedules` shows it, `!unschedule N` and the tools take it
    agent: str
    prompt: str
    cron: str | None  # a cron expression, or None for a single run
    due: int | None  # the next run (ms since the epoch); None once over
    state: str  # waiting (for the owner's approval) | active | declined | done | cancelled
    created: int
    approved: int | None = None  # when the owner approved a repeating one (ms)


@dataclass(frozen=True)
class SessionRecord:
    """A session of a member in one conversation, as the bridge recorded it (store/sessions.py)."""

    channel_id: str
    agent: str
    conversation: str  # "" the main timeline; a thread's root event id
    session_id: str
    title: str | None  # the agent's title, else the first prompt's first line (shortened)
    created: int  # ms
    used: int  # ms: last opened or prompted
