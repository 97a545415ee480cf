"""What a running turn writes into its record (store/turns.py) as it happens: posted, prompted,
finishing, then answered, ended or interrupted — or released, when the bridge stops before the
agent had the prompt (the next start runs it again).

The writes that record what already happened (the prompt written, the answer sent) must not be
lost to a database that is down for a moment: they go through the store-outage queue
(`later`), written at once or, in order, as soon as the database is back. A write lost to a
kill leaves the record one step behind, and the next start acts on that step (recovery_plan.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from store import StoreError, StoreUnavailable, TurnRecord
from store.turns import DROPPED, ENDED, INTERRUPTED

log = logging.getLogger(__name__)

PROMPT_RETRY = 0.25  # seconds at least between tries of the prompt's step while the database is away
PROMPT_RETRY_MAX = 5.0
FINISHING_WAIT = 2.0  # seconds the final send waits for its record's step when the database hangs


class Journal:
    def __init__(self, db, later: Callable[[str, Callable[[], object]], None], record: TurnRecord, room_id: str):
        self._db = db  # the store off the loop (store/offloop.py): writes keep their order
        self._turns = db.turns
        self._later = later
        self.record = record
        self._room = room_id
        self.closed = False  # the turn's last state is written (or on its way)

    def _soon(self, what: str, write: Callable[[], object]) -> None:
        """A step whose loss the next start can repair: written in order, not waited for."""
        self._db.soon(f"turn in {self._room}: {what}", write)

    def posted(self, answer: list[str]) -> None:
        turns, turn_id = self._db.target.turns, self.record.id
        self._soon("placeholder posted", lambda: turns.posted(turn_id, answer))

    def messages(self, answer: list[str]) -> None:
        turns, turn_id = self._db.target.turns, self.record.id
        self._soon("answer messages", lambda: turns.set_answer(turn_id, answer))

    async def prompting(self, answer: list[str]) -> None:
        """Before `session/prompt` is written: awaited, so that the record says so first. A
        database away for now is waited for (the agent has nothing yet: shown interrupted,
        the message would never be answered; docs/outages.md)."""
        while True:
            try:
                await self._turns.prompting(self.record.id, answer)
                return
            except StoreUnavailable as exc:  # nothing written: the same step again, when due
                log.info("turn in %s waits for the database before its prompt: %s", self._room, exc)
                try:
                    due = await self._db.retry_in()
                except StoreError:
                    due = 0.0
                await asyncio.sleep(min(max(due, PROMPT_RETRY), PROMPT_RETRY_MAX))

    def prompted(self, answer: list[str]) -> None:
        """`session/prompt` was written (as it was: told with no await since)."""
        turns, turn_id = self._db.target.turns, self.record.id
        self._soon("prompt written", lambda: turns.prompted(turn_id, answer))

    async def finishing(self, final: dict) -> None:
        """Before the final text is sent: awaited, so that a stop after it never marks that
        finished answer interrupted (the next start sends it again instead). A database that
        hangs is waited for FINISHING_WAIT at most: the answer is sent, its record is written
        when the database answers, in order (docs/outages.md "The database away mid-answer")."""
        writing = asyncio.ensure_future(self._turns.finishing(self.record.id, final, final.get("answer") or []))
        try:
            await asyncio.wait_for(asyncio.shield(writing), FINISHING_WAIT)
        except TimeoutError:  # still on the database thread: written when it answers
            writing.add_done_callback(_logged_late(self._room))
            log.warning("turn in %s: the final send goes before its record (the database does not answer)", self._room)
        except StoreError as exc:  # the answer still goes out; a kill now would mark it cut
            log.warning("turn in %s: the final send not recorded (%s)", self._room, exc)

    def answered(self, channel_id: str, agent: str, text: str, event_ids: list[str], seen_upto: str | None) -> None:
        self.closed = True
        turns, turn_id = self._db.target.turns, self.record.id

        def write() -> None:
            try:
                turns.answered(turn_id, channel_id, agent, text, event_ids, seen_upto)
            except LookupError:  # the channel was deleted (!delete) while the answer was written
                log.info("answer in %s not stored: the channel is gone", self._room)

        self._later(f"the answer in {self._room}", write)

    def ended(self, state: str, answer: list[str], seen: tuple[str, str, str] | None) -> None:
        assert state in (ENDED, INTERRUPTED, DROPPED)
        self.closed = True
        turns, turn_id = self._db.target.turns, self.record.id
        self._later(f"the end of the turn in {self._room}", lambda: turns.end(turn_id, state, answer, seen))

    def release(self) -> None:
        self.closed = True
        turns, turn_id = self._db.target.turns, self.record.id
        self._soon("release", lambda: turns.release(turn_id))


def _logged_late(room: str) -> Callable[[asyncio.Future], None]:
    """What says how a record's step left waiting on a hanging database ended."""

    def done(future: asyncio.Future) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("turn in %s: the final send not recorded (%s)", room, future.exception())

    return done
