"""Scheduled work: what an agent asked to run later in its conversation
(docs/architecture.md "MCP tools and schedules").

A schedule is a row: its prompt, its agent, its conversation, when it runs next (`due`, ms) and,
for a repeating one, its cron expression. A run is a turn record (store/turns.py) whose prompt
key is `schedule:<id>:<due>`: `fire` inserts that turn and moves the schedule on (its next due
time, or over) in one transaction, so a run is taken once — the turn's key is unique, and the
schedule no longer points at a time that was taken — whatever stops the bridge in between.

The store does not read cron expressions: the caller gives each next due time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ids import new_id, now_ms
from .records import ScheduleRecord, TurnRecord

if TYPE_CHECKING:
    from .store import Store

ACTIVE, DONE, CANCELLED = "active", "done", "cancelled"
COLUMNS = ("id", "channel_id", "conversation", "number", "agent", "prompt", "cron", "due", "state", "created")
KEY_PREFIX = "schedule:"


class TooManySchedules(Exception):
    """The conversation has the most schedules it may have."""


def run_key(schedule_id: str, due: int) -> str:
    """The prompt key of the run of `schedule_id` due at `due` (ms): its turn's `prompt_event`."""
    return f"{KEY_PREFIX}{schedule_id}:{due}"


def parse_run_key(key: str) -> tuple[str, int] | None:
    """(schedule id, due ms) of a run's prompt key; None for any other prompt (an event id)."""
    if not key.startswith(KEY_PREFIX):
        return None
    ident, _, due = key[len(KEY_PREFIX):].rpartition(":")
    try:
        return (ident, int(due)) if ident else None
    except ValueError:
        return None


class Schedules:
    def __init__(self, store: "Store") -> None:
        self._store = store

    def add(self, channel_id: str, conversation: str, agent: str, prompt: str, due: int,
            cron: str | None, most: int) -> ScheduleRecord:
        """A new schedule (its number the channel's next); TooManySchedules when the conversation
        already has `most` active ones."""
        return self._store._run(_add, channel_id, conversation, agent, prompt, due, cron, most)

    def listed(self, channel_id: str, conversation: str | None = None) -> list[ScheduleRecord]:
        """The active schedules of a channel (of one conversation, if given), by number."""
        return self._store._run(_listed, channel_id, conversation)

    def get(self, schedule_id: str) -> ScheduleRecord | None:
        return self._store._run(_get, schedule_id)

    def cancel(self, channel_id: str, number: int, conversation: str | None = None) -> ScheduleRecord | None:
        """Cancel the active schedule `number` of the channel (of that conversation, if given):
        the record as it was, or None if there is no such active schedule."""
        return self._store._run(_cancel, channel_id, number, conversation)

    def due(self, until: int) -> list[ScheduleRecord]:
        """The active schedules due at or before `until` (ms), earliest first."""
        return self._store._run(_due, until)

    def next_due(self) -> int | None:
        """When the earliest active schedule is due (ms), or None."""
        return self._store._run(_next_due)

    def fire(self, schedule_id: str, due: int, next_due: int | None, run: str) -> TurnRecord | None:
        """Take the run of `schedule_id` due at `due`: its turn (prompt key run_key(id, due)) and
        the schedule moved on to `next_due` (None: over), in one transaction. None when that run
        was taken already or the schedule is no longer active at that time."""
        return self._store._run(_fire, schedule_id, due, next_due, run)


# --- the operations (run by Store._run, under its lock) ----------------------------------------

def _record(row: tuple) -> ScheduleRecord:
    values = dict(zip(COLUMNS, row))
    return ScheduleRecord(**{**values, "number": int(values["number"]),
                             "due": None if values["due"] is None else int(values["due"]),
                             "created": int(values["created"] or 0)})


def _select(store: "Store"):
    S = store._m.Schedule
    return S.select(*(getattr(S, c) for c in COLUMNS))


def _get(store: "Store", schedule_id: str) -> ScheduleRecord | None:
    row = _select(store).where(store._m.Schedule.id == schedule_id).tuples().first()
    return _record(row) if row else None


def _add(store: "Store", channel_id: str, conversation: str, agent: str, prompt: str, due: int,
         cron: str | None, most: int) -> ScheduleRecord:
    S = store._m.Schedule
    with store._db.atomic():
        active = (S.select().where((S.channel_id == channel_id) & (S.conversation == conversation)
                                   & (S.state == ACTIVE)).count())
        if active >= most:
            raise TooManySchedules(f"this conversation has {active} schedules, the most it may have")
        row = S.select(S.number).where(S.channel_id == channel_id).order_by(S.number.desc()).limit(1).tuples().first()
        number = (int(row[0]) if row else 0) + 1
        schedule_id = new_id()
        S.insert(id=schedule_id, channel_id=channel_id, conversation=conversation, number=number, agent=agent,
                 prompt=prompt, cron=cron, due=int(due), state=ACTIVE, created=now_ms()).execute()
        return _get(store, schedule_id)


def _listed(store: "Store", channel_id: str, conversation: str | None) -> list[ScheduleRecord]:
    S = store._m.Schedule
    where = (S.channel_id == channel_id) & (S.state == ACTIVE)
    if conversation is not None:
        where &= S.conversation == conversation
    return [_record(row) for row in _select(store).where(where).order_by(S.number).tuples()]


def _cancel(store: "Store", channel_id: str, number: int, conversation: str | None) -> ScheduleRecord | None:
    S = store._m.Schedule
    with store._db.atomic():
        where = (S.channel_id == channel_id) & (S.number == number) & (S.state == ACTIVE)
        if conversation is not None:
            where &= S.conversation == conversation
        row = _select(store).where(where).tuples().first()
        if row is None:
            return None
        S.update(state=CANCELLED, due=None).where(S.id == row[0]).execute()
        return _record(row)


def _due(store: "Store", until: int) -> list[ScheduleRecord]:
    S = store._m.Schedule
    return [_record(row) for row in _select(store).where((S.state == ACTIVE) & (S.due <= until))
            .order_by(S.due, S.id).tuples()]


def _next_due(store: "Store") -> int | None:
    S = store._m.Schedule
    row = S.select(S.due).where(S.state == ACTIVE).order_by(S.due).limit(1).tuples().first()
    return None if row is None or row[0] is None else int(row[0])


def _fire(store: "Store", schedule_id: str, due: int, next_due: int | None, run: str) -> TurnRecord | None:
    from .turns import _insert_turns
    S = store._m.Schedule
    with store._db.atomic():
        row = _select(store).where((S.id == schedule_id) & (S.state == ACTIVE) & (S.due == due)).tuples().first()
        if row is None:
            return None
        schedule = _record(row)
        made = _insert_turns(store, schedule.channel_id, run_key(schedule_id, due), None,
                             [(schedule.agent, schedule.prompt, False)], run, schedule.conversation)
        S.update(due=next_due, state=ACTIVE if next_due is not None else DONE).where(S.id == schedule_id).execute()
        return made[0] if made else None
