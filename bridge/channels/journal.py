"""What a running turn writes into its record (store/turns.py) as it happens: posted, prompted,
finishing, then answered, ended or interrupted — or released, when the bridge stops before the
agent had the prompt (the next start runs it again).

The writes that record what already happened (the prompt written, the answer sent) must not be
lost to a database that is down for a moment: they go through the store-outage queue
(`later`), written at once or, in order, as soon as the database is back. A write lost to a
kill leaves the record one step behind, and the next start acts on that step (recovery_plan.py).
"""
from __future__ import annotations

import logging
from typing import Callable

from store import StoreError, TurnRecord
from store.turns import DROPPED, ENDED, INTERRUPTED

log = logging.getLogger(__name__)


class Journal:
    def __init__(self, turns, later: Callable[[str, Callable[[], object]], None], record: TurnRecord,
                 room_id: str):
        self._turns = turns
        self._later = later
        self.record = record
        self._room = room_id
        self.closed = False  # the turn's last state is written (or on its way)

    def _now(self, what: str, write: Callable[[], object]) -> None:
        """A step whose loss the next start can repair: written now or not at all."""
        try:
            write()
        except StoreError as exc:
            log.warning("turn in %s: %s not recorded (%s)", self._room, what, exc)

    def posted(self, answer: list[str]) -> None:
        self._now("placeholder posted", lambda: self._turns.posted(self.record.id, answer))

    def messages(self, answer: list[str]) -> None:
        self._now("answer messages", lambda: self._turns.set_answer(self.record.id, answer))

    def prompted(self, answer: list[str]) -> None:
        """No await since `session/prompt` was written: kept even through a database outage."""
        self._later(f"the prompt of the turn in {self._room}", lambda: self._turns.prompted(self.record.id, answer))

    def finishing(self, final: dict) -> None:
        answer = final.get("answer") or []
        self._later(f"the final text of the answer in {self._room}",
                    lambda: self._turns.finishing(self.record.id, final, answer))

    def answered(self, channel_id: str, agent: str, text: str, event_ids: list[str],
                 seen_upto: str | None) -> None:
        self.closed = True
        def write() -> None:
            try:
                self._turns.answered(self.record.id, channel_id, agent, text, event_ids, seen_upto)
            except LookupError:  # the channel was deleted (!delete) while the answer was written
                log.info("answer in %s not stored: the channel is gone", self._room)
        self._later(f"the answer in {self._room}", write)

    def ended(self, state: str, answer: list[str], seen: tuple[str, str, str] | None) -> None:
        assert state in (ENDED, INTERRUPTED, DROPPED)
        self.closed = True
        self._later(f"the end of the turn in {self._room}",
                    lambda: self._turns.end(self.record.id, state, answer, seen))

    def release(self) -> None:
        self.closed = True
        self._now("release", lambda: self._turns.release(self.record.id))
