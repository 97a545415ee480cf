"""Scheduled work: what an agent asked to run later in its conversation
(docs/architecture.md "MCP tools and schedules").

A schedule is a row: its prompt, its agent, its conversation, when it runs next (`due`, ms) and,
for a repeating one, its cron expression. A run is a turn record (store/turns.py) whose prompt
key is `schedule:<id>:<due>`: `fire` inserts that turn and moves the schedule on (its next due
time, or over) in one transaction, so a run is taken once — the turn's key is unique, and the
schedule no longer points at a time that was taken — whatever stops the bridge in between.

A repeating schedule an agent asks for starts `waiting` for the owner's approval and runs only
once `decide` made it `active`; declined, it is `declined` until the agent's `schedules()` has
said so (`declined_news`), then `cancelled`. A run is skipped — the schedule moved on, no turn —
while an earlier run of the same schedule has not ended (`fire`), and cancelling a schedule
drops its runs still queued (turns `taken`, not begun).

The store does not read cron expressions: the caller gives each next due time.
"""

from __future__ import annotations

from .core import Core, Part, operation
from .ids import new_id, now_ms
from .records import ScheduleRecord, TurnRecord
from .schema import next_number, select
from .turn_states import DROPPED, LIVE, TAKEN
from .turns import Turns

ACTIVE, DONE, CANCELLED = "active", "done", "cancelled"
WAITING, DECLINED = "waiting", "declined"  # for the owner's approval; not approved (not yet told)
LISTED = (WAITING, ACTIVE)  # what `!schedules` and `schedules()` show, and what can be cancelled
COLUMNS = (
    "id",
    "channel_id",
    "conversation",
    "number",
    "agent",
    "prompt",
    "cron",
    "due",
    "state",
    "created",
    "approved",
)
KEY_PREFIX = "schedule:"


class TooManySchedules(Exception):
    """The conversation has the most schedules it may have."""


class NotYours(Exception):
    """The schedule is another agent's (its name is the message)."""


class Skipped:
    """`fire` moved the schedule on without a run: its earlier run has not ended."""

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = Skipped()


def run_key(schedule_id: str, due: int) -> str:
    """The prompt key of the run of `schedule_id` due at `due` (ms): its turn's `prompt_event`."""
    return f"{KEY_PREFIX}{schedule_id}:{due}"


def parse_run_key(key: str) -> tuple[str, int] | None:
    """(schedule id, due ms) of a run's prompt key; None for any other prompt (an event id)."""
    if not key.startswith(KEY_PREFIX):
        return None
    ident, _, due = key[len(KEY_PREFIX) :].rpartition(":")
    try:
        return (ident, int(due)) if ident else None
    except ValueError:
        return None


def _record(row: tuple) -> ScheduleRecord:
    values = dict(zip(COLUMNS, row))
    return ScheduleRecord(
        **{
            **values,
            "number": int(values["number"]),
            "due": None if values["due"] is None else int(values["due"]),
            "created": int(values["created"] or 0),
            "approved": None if values["approved"] is None else int(values["approved"]),
        }
    )


class Schedules(Part):
    def __init__(self, core: Core, turns: Turns) -> None:
        super().__init__(core)
        self.turns = turns

    def _select(self, where):
        """The query of the schedules `where` picks (each caller orders them)."""
        return select(self.core.models.Schedule, COLUMNS).where(where)

    def _records(self, query) -> list[ScheduleRecord]:
        return [_record(row) for row in query.tuples()]

    @operation
    def add(
        self,
        channel_id: str,
        conversation: str,
        agent: str,
        prompt: str,
        due: int,
        cron: str | None,
        most: int,
        waiting: bool = False,
    ) -> ScheduleRecord:
        """A new schedule (its number the channel's next), `waiting` for the owner's approval
        or active; TooManySchedules when the conversation already has `most` listed ones."""
        S = self.core.models.Schedule
        with self.core.db.atomic():
            listed = (
                S.select()
                .where((S.channel_id == channel_id) & (S.conversation == conversation) & S.state.in_(list(LISTED)))
                .count()
            )
            if listed >= most:
                raise TooManySchedules(f"this conversation has {listed} schedules, the most it may have")
            schedule_id = new_id()
            S.insert(
                id=schedule_id,
                channel_id=channel_id,
                conversation=conversation,
                number=next_number(S, channel_id),
                agent=agent,
                prompt=prompt,
                cron=cron,
                due=int(due),
                state=WAITING if waiting else ACTIVE,
                created=now_ms(),
            ).execute()
            made = self.get(schedule_id)
            assert made is not None  # written just now, in this transaction
            return made

    @operation
    def listed(
        self, channel_id: str, conversation: str | None = None, agent: str | None = None
    ) -> list[ScheduleRecord]:
        """The active and waiting schedules of a channel (of one conversation, of one agent, if
        given), by number."""
        S = self.core.models.Schedule
        where = (S.channel_id == channel_id) & S.state.in_(list(LISTED))
        if conversation is not None:
            where &= S.conversation == conversation
        if agent is not None:
            where &= S.agent == agent
        return self._records(self._select(where).order_by(S.number))

    @operation
    def get(self, schedule_id: str) -> ScheduleRecord | None:
        row = self._select(self.core.models.Schedule.id == schedule_id).tuples().first()
        return _record(row) if row else None

    def _runs_of(self, schedule_id: str):
        """The turns of a schedule's runs (their prompt keys start with its run key's prefix)."""
        return self.core.models.Turn.prompt_event.startswith(f"{KEY_PREFIX}{schedule_id}:")

    @operation
    def cancel(
        self, channel_id: str, number: int, conversation: str | None = None, agent: str | None = None
    ) -> tuple[ScheduleRecord, int] | None:
        """Cancel the active or waiting schedule `number` of the channel (of that conversation,
        if given) and drop its runs not begun: (the record as it was, how many runs were
        dropped), or None if there is no such schedule. With `agent`: NotYours when it is
        another agent's."""
        S, T = self.core.models.Schedule, self.core.models.Turn
        with self.core.db.atomic():
            where = (S.channel_id == channel_id) & (S.number == number) & S.state.in_(list(LISTED))
            if conversation is not None:
                where &= S.conversation == conversation
            row = self._select(where).tuples().first()
            if row is None:
                return None
            record = _record(row)
            if agent is not None and record.agent != agent:
                raise NotYours(record.agent)
            S.update(state=CANCELLED, due=None).where(S.id == record.id).execute()
            dropped = (
                T.update(state=DROPPED, updated=now_ms()).where(self._runs_of(record.id) & (T.state == TAKEN)).execute()
            )
            return record, int(dropped)

    @operation
    def waiting(self) -> list[ScheduleRecord]:
        """Every schedule waiting for the owner's approval, oldest first."""
        S = self.core.models.Schedule
        return self._records(self._select(S.state == WAITING).order_by(S.id))

    @operation
    def decide(self, schedule_id: str, approved: bool, due: int | None, at: int) -> ScheduleRecord | None:
        """The owner's answer to a waiting schedule: approved (active from `due`, approved `at`)
        or declined. The record as it is now; None if it was no longer waiting."""
        S = self.core.models.Schedule
        with self.core.db.atomic():
            values = (
                dict(state=ACTIVE, due=due, approved=at)
                if approved and due is not None
                else dict(state=DECLINED, due=None)
            )
            if not S.update(**values).where((S.id == schedule_id) & (S.state == WAITING)).execute():
                return None
            return self.get(schedule_id)

    @operation
    def declined_news(self, channel_id: str, conversation: str, agent: str) -> list[ScheduleRecord]:
        """The agent's declined schedules it was not told of yet; from now on it has been."""
        S = self.core.models.Schedule
        with self.core.db.atomic():
            where = (
                (S.channel_id == channel_id)
                & (S.conversation == conversation)
                & (S.agent == agent)
                & (S.state == DECLINED)
            )
            found = self._records(self._select(where).order_by(S.number))
            if found:
                S.update(state=CANCELLED).where(S.id.in_([s.id for s in found])).execute()
            return found

    @operation
    def due(self, until: int) -> list[ScheduleRecord]:
        """The active schedules due at or before `until` (ms), earliest first."""
        S = self.core.models.Schedule
        return self._records(self._select((S.state == ACTIVE) & (S.due <= until)).order_by(S.due, S.id))

    @operation
    def next_due(self) -> int | None:
        """When the earliest active schedule is due (ms), or None."""
        S = self.core.models.Schedule
        row = S.select(S.due).where(S.state == ACTIVE).order_by(S.due).limit(1).tuples().first()
        return None if row is None or row[0] is None else int(row[0])

    @operation
    def fire(
        self, schedule_id: str, due: int, next_due: int | None, run: str, text: str | None = None
    ) -> TurnRecord | Skipped | None:
        """Take the run of `schedule_id` due at `due`: its turn (prompt key run_key(id, due),
        told `text`, the schedule's prompt if None) and the schedule moved on to `next_due`
        (None: over), in one transaction. SKIPPED (moved on, no turn) while an earlier run of
        it has not ended; None when that run was taken already or the schedule is no longer
        active at that time."""
        S, T = self.core.models.Schedule, self.core.models.Turn
        with self.core.db.atomic():
            row = self._select((S.id == schedule_id) & (S.state == ACTIVE) & (S.due == due)).tuples().first()
            if row is None:
                return None
            schedule = _record(row)
            S.update(due=next_due, state=ACTIVE if next_due is not None else DONE).where(S.id == schedule_id).execute()
            if T.select().where(self._runs_of(schedule_id) & T.state.in_(list(LIVE))).exists():
                return SKIPPED  # its earlier run still waits or runs: runs never pile up
            made = self.turns.insert(
                schedule.channel_id,
                run_key(schedule_id, due),
                None,
                [(schedule.agent, schedule.prompt if text is None else text, False)],
                run,
                schedule.conversation,
            )
            return made[0] if made else None
