"""Scheduled work comes due (docs/architecture.md "MCP tools and schedules"): each run is a turn,
claimed through the turn record.

The scheduler sleeps until the earliest schedule is due (or a schedule is added or cancelled),
then, for each one due, takes its run: `store.schedules.fire` inserts the turn (prompt key
`schedule:<id>:<due>`) and moves the schedule on in one transaction, and the turn goes to its
channel's portal like any other, which claims it before running it (store/turns.py). So a run is
taken once and started once, restarts included: a run taken but not begun when the bridge stopped
is run by the next start's recovery (recovery.py); a run that came due while the bridge was down
is taken at the next start, once, however many times a cron named meanwhile, and says it is late.

Before its answer the conversation shows one line from the agent's puppet: which agent scheduled
what (schedule_times.run_line), sent with a transaction id of the turn, so never twice. The
agent is told the run framed (schedule_frames.run_prompt): a scheduled run, whose, set when —
never as the owner's words.

Scheduled work is the owner's decision (docs/SECURITY.md, "Scheduled work"): a repeating
schedule an agent asks for waits (`waiting`) until the owner approves it through the asks of
permission prompts (asks.py: a number or a keycap reaction); declined or unanswered, it is
removed. Each start asks again for the ones still waiting. A single run is posted with the
command that cancels it. A run is skipped while an earlier run of its schedule has not ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from store import StoreError, TurnRecord
from store.ids import now_ms
from store.schedules import SKIPPED, parse_run_key
from store.turns import DROPPED

from ...matrix.puppet import relating
from ..asks.asks import Asking
from ..base.conversations import relation_for
from ..base.parts import AskedIn
from ..turns.incoming import Incoming
from . import schedule_frames as frames
from .schedule_args import BadArguments
from .schedule_times import after_run, is_late, next_due, run_line

if TYPE_CHECKING:
    from store.offloop import OffLoop
    from store.records import ScheduleRecord

    from ...matrix.identities import Identities
    from ..base.registry import Channels
    from ..turns.portal import Portal

log = logging.getLogger(__name__)

LONGEST_SLEEP = 60.0  # seconds: the clock is looked at again at least this often
RETRY_AFTER = 5.0  # seconds after the store failed


def _forget(tasks: dict, key: str, _done: object) -> None:
    """A finished ask leaves the table of asks in flight."""
    tasks.pop(key, None)


class Scheduler:
    def __init__(
        self, db: OffLoop, channels: Channels, identities: Identities, run_id: str, clock: Callable[[], int] = now_ms
    ) -> None:
        self.db, self.channels, self.identities = db, channels, identities
        self.run_id = run_id  # the bridge's run: the runs it takes are marked with it
        # what time it is (ms since the epoch): a test moves it on instead of waiting (`changed`)
        self.clock = clock
        self.started_ms = clock()  # a run due before this was missed while the bridge was down
        self.fired = 0
        self.skipped = 0  # runs not taken: an earlier run of their schedule had not ended
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._asking: dict[str, asyncio.Task] = {}  # schedule id → its approval ask, open
        self._posting: set[asyncio.Task] = set()
        self._stopping = False

    def start(self) -> None:
        self._stopping = False
        self.started_ms = self.clock()
        self._task = asyncio.create_task(self._loop(), name="scheduler")

    async def stop(self) -> None:
        self._stopping = True
        tasks = [t for t in (self._task, *self._asking.values(), *self._posting) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None

    def changed(self, added: ScheduleRecord | None = None, cancelled: str | None = None) -> None:
        """A schedule was added (`added`) or cancelled (`cancelled`: its id): look at the times
        again, ask the owner about a new repeating one, post a new single one with its cancel
        command, end the ask of a cancelled one."""
        if cancelled is not None:
            self.withdrawn(cancelled)
        if added is not None and added.cron is None:
            task = asyncio.create_task(self._post_single(added), name=f"schedule-{added.id}-posted")
            self._posting.add(task)
            task.add_done_callback(self._posting.discard)
        self._wake.set()

    def withdrawn(self, schedule_id: str) -> None:
        """A waiting schedule was cancelled: its ask ends (shown as cancelled)."""
        task = self._asking.get(schedule_id)
        if task is not None:
            task.cancel()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.ask_waiting()
                await self.fire_due()
                due = await self.db.schedules.next_due()
                sleep = LONGEST_SLEEP if due is None else min(LONGEST_SLEEP, max(0.0, (due - self.clock()) / 1000))
            except StoreError as exc:
                log.info("scheduled work waits for the database: %s", exc)
                sleep = RETRY_AFTER
            except Exception:
                log.exception("the scheduler failed; trying again")
                sleep = RETRY_AFTER
            try:
                await asyncio.wait_for(self._wake.wait(), sleep)
            except TimeoutError:
                pass

    async def fire_due(self) -> int:
        """Take every run that is due; the number taken."""
        db, fired = self.db, 0
        now = self.clock()
        for schedule in await db.schedules.due(now):
            try:
                following = after_run(schedule.cron, schedule.due, now)
            except BadArguments:
                following = None  # a cron croniter no longer reads: this run is its last
            text = frames.run_prompt(
                schedule.agent,
                schedule.number,
                schedule.created,
                schedule.cron,
                schedule.approved,
                schedule.due,
                is_late(schedule.due, self.started_ms),
                schedule.prompt,
            )
            turn = await db.schedules.fire(schedule.id, schedule.due, following, self.run_id, text)
            if turn is SKIPPED:
                self.skipped += 1
                log.info(
                    "schedule %d of %s: a run skipped, its earlier run has not ended", schedule.number, schedule.agent
                )
                continue
            if turn is None:
                continue
            fired += 1
            self.fired += 1
            channel = await db.channel(schedule.channel_id)
            portal = await self.channels.portal_for(channel.room_id) if channel is not None else None
            if portal is None:
                await db.turns.end(turn.id, DROPPED)
                continue
            portal.submit(turn, Incoming(None, turn.prompt_event, turn.text))
        return fired

    # ---- the owner's decision ------------------------------------------------------------------

    async def ask_waiting(self) -> None:
        """Ask the owner about every waiting schedule not being asked about already."""
        for schedule in await self.db.schedules.waiting():
            if schedule.id not in self._asking:
                task = asyncio.create_task(self._ask(schedule), name=f"schedule-{schedule.id}-ask")
                self._asking[schedule.id] = task
                task.add_done_callback(partial(_forget, self._asking, schedule.id))

    async def _where(self, schedule: ScheduleRecord):
        """The schedule's portal and its agent's puppet posting into its conversation (None, None
        when the channel is gone)."""
        channel = await self.db.channel(schedule.channel_id)
        portal = await self.channels.portal_for(channel.room_id) if channel is not None else None
        if portal is None:
            return None, None
        puppet = relating(
            await self.identities.puppet(schedule.agent), portal.room_id, relation_for(schedule.conversation)
        )
        return portal, puppet

    async def _ask(self, schedule: ScheduleRecord) -> None:
        """The owner approves or declines a repeating schedule, by the permission prompts' asks
        (a number, a keycap): approved, it runs from the next time its cron names; declined or
        unanswered, it is removed. Stopped (the bridge stops, `!unschedule`), it stays as it is."""
        if schedule.agent not in self.identities.config.agents:
            return  # an agent no longer configured: nothing of it runs
        try:
            portal, puppet = await self._where(schedule)
            if portal is None:
                return
            first = next_due(schedule.cron or "", self.clock())
            shown = frames.approval_ask(schedule.agent, schedule.number, schedule.cron or "", first, schedule.prompt)

            async def decided(ask) -> tuple[bool, str]:
                approved = frames.OPTIONS[await ask.chosen] == frames.APPROVE
                return approved, frames.outcome_line(approved, schedule.cron or "")

            # `run`: no turn of the portal shows this wait (the agent asked in an earlier turn)
            approved = await portal.parts.permissions.asks.ask(
                AskedIn(portal, puppet, schedule.conversation, asker=None, run=_NO_TURN),
                Asking(
                    shown,
                    frames.WAITING_STATUS,
                    decided,
                    (False, frames.TIMED_OUT),
                    lambda: frames.STOPPED if self._stopping else frames.WITHDRAWN,
                    None,
                    frames.OPTIONS,
                ),
            )
        except (BadArguments, StoreError) as exc:
            log.warning("schedule %d of %s could not be asked about: %s", schedule.number, schedule.agent, exc)
            return
        if approved is None:
            return  # the ask could not be posted: asked again at the next start
        due = None
        if approved:
            try:
                due = next_due(schedule.cron or "", self.clock())
            except BadArguments:
                approved = False
        decided_now = await self.db.schedules.decide(schedule.id, approved, due, self.clock())
        log.info(
            "schedule %d of %s %s by the owner",
            schedule.number,
            schedule.agent,
            "approved" if approved else "not approved",
        )
        if decided_now is not None:
            self.changed()

    async def _post_single(self, schedule: ScheduleRecord) -> None:
        """A new single run, posted with the command that cancels it."""
        try:
            portal, puppet = await self._where(schedule)
            if portal is None or schedule.due is None:
                return
            await portal.parts.notices.send(
                puppet,
                portal.room_id,
                frames.single_run_notice(schedule.agent, schedule.number, schedule.due, schedule.prompt),
            )
        except Exception as exc:  # the schedule stands: `!schedules` lists it
            log.warning("schedule %d of %s could not be posted: %s", schedule.number, schedule.agent, exc)

    async def announce(self, portal: Portal, turn: TurnRecord) -> None:
        """The line before a scheduled run's answer: who scheduled what (late, if it was missed)."""
        key = parse_run_key(turn.prompt_event)
        if key is None:
            return
        schedule_id, due = key
        schedule = await self.db.schedules.get(schedule_id)
        puppet = relating(await self.identities.puppet(turn.agent), portal.room_id, relation_for(turn.conversation))
        line = run_line(
            turn.agent, schedule.prompt if schedule is not None else turn.text, due, is_late(due, self.started_ms)
        )
        try:
            await puppet.intent.send(
                portal.room_id, {"msgtype": "m.notice", "body": line}, txn_id=f"sk-{turn.id}-scheduled"
            )
        except Exception as exc:  # the answer matters more than its heading
            log.warning("the line of scheduled run %s could not be posted: %s", turn.id, exc)

    async def agent_gone(self, turn: TurnRecord) -> None:
        """A run whose agent is no longer in the room: not run, and its schedule is cancelled."""
        db = self.db
        await db.turns.end(turn.id, DROPPED)
        key = parse_run_key(turn.prompt_event)
        schedule = await db.schedules.get(key[0]) if key is not None else None
        if schedule is not None:
            await db.schedules.cancel(schedule.channel_id, schedule.number)
            self.withdrawn(schedule.id)
            log.info("schedule %d of %s cancelled: %s left the room", schedule.number, schedule.agent, schedule.agent)

    async def listing(self, channel_id: str) -> str:
        """What `!schedules` says."""
        listed = await self.db.schedules.listed(channel_id)
        if not listed:
            return "Nothing is scheduled here. Agents schedule work with their `schedule` tool."
        lines = [
            f"{s.number}. {s.agent}, {frames.owner_when(s.state, s.due, s.cron)}: {frames.shown(s.prompt)}"
            for s in listed
        ]
        return "Scheduled here:\n" + "\n".join(lines) + "\n!unschedule N cancels one."


class _NoTurn:
    """An ask no turn waits on: no answer's status line changes while it is open."""


_NO_TURN = _NoTurn()
