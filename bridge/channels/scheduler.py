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
what (schedule_times.run_line), sent with a transaction id of the turn, so never twice.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

from store import StoreError, TurnRecord
from store.ids import now_ms
from store.schedules import parse_run_key
from store.turns import DROPPED

from ..matrix.puppet import relating
from .conversations import relation_for
from .incoming import Incoming
from .schedule_args import BadArguments
from .schedule_times import after_run, is_late, run_line, when_text

if TYPE_CHECKING:
    from store.offloop import OffLoop

    from ..matrix.identities import Identities
    from .portal import Portal
    from .registry import Channels

log = logging.getLogger(__name__)

LONGEST_SLEEP = 60.0  # seconds: the clock is looked at again at least this often
RETRY_AFTER = 5.0     # seconds after the store failed


class Scheduler:
    def __init__(self, db: "OffLoop", channels: "Channels", identities: "Identities", run_id: str,
                 clock: Callable[[], int] = now_ms) -> None:
        self.db, self.channels, self.identities = db, channels, identities
        self.run_id = run_id  # the bridge's run: the runs it takes are marked with it
        # what time it is (ms since the epoch): a test moves it on instead of waiting (`changed`)
        self.clock = clock
        self.started_ms = clock()  # a run due before this was missed while the bridge was down
        self.fired = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.started_ms = self.clock()
        self._task = asyncio.create_task(self._loop(), name="scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def changed(self) -> None:
        """A schedule was added or cancelled: look at the times again."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
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
            except asyncio.TimeoutError:
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
            turn = await db.schedules.fire(schedule.id, schedule.due, following, self.run_id)
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

    async def announce(self, portal: "Portal", turn: TurnRecord) -> None:
        """The line before a scheduled run's answer: who scheduled what (late, if it was missed)."""
        key = parse_run_key(turn.prompt_event)
        if key is None:
            return
        _, due = key
        puppet = relating(await self.identities.puppet(turn.agent), portal.room_id, relation_for(turn.conversation))
        line = run_line(turn.agent, turn.text, due, is_late(due, self.started_ms))
        try:
            await puppet.intent.send(portal.room_id, {"msgtype": "m.notice", "body": line},
                                     txn_id=f"sk-{turn.id}-scheduled")
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
            log.info("schedule %d of %s cancelled: %s left the room", schedule.number, schedule.agent, schedule.agent)

    async def listing(self, channel_id: str) -> str:
        """What `!schedules` says."""
        listed = await self.db.schedules.listed(channel_id)
        if not listed:
            return "Nothing is scheduled here. Agents schedule work with their `schedule` tool."
        lines = [f"{s.number}. {s.agent}, {when_text(s.due, s.cron)}: "
                 f"{s.prompt if len(s.prompt) <= 300 else s.prompt[:300] + '…'}" for s in listed]
        return "Scheduled here:\n" + "\n".join(lines) + "\n!unschedule N cancels one."
