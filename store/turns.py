"""Turn records: one row per turn — one agent answering one prompt in one conversation
(docs/reliability.md "Exactly once").

    taken ──claim──▶ claimed ──▶ posted ──▶ prompting ──▶ prompted ──▶ finishing ──▶ done
      ▲                 │           │           │             (answer stored, same transaction)
      └────release──────┴───────────┘           ├──▶ ended        (stopped, the agent crashed…)
                                                └──▶ interrupted  (the bridge stopped or failed)
    taken / claimed / posted ──▶ dropped   (redacted, `!drop`, the agent or the channel is gone)

- `take` stores an owner message and its turns in one transaction: a message is never stored
  without its turns, nor turns without their message.
- `claim` is the one way to start a turn: it succeeds once per bridge run, for a turn this run
  took or one an earlier run left before its prompt reached the agent. Whatever the order in
  which a transaction, the same transaction sent again, start-up recovery or a schedule ask, a
  turn starts once per run; and once `prompted`, never again (it is interrupted, or finished).
- `answered` stores the answer, what the agent has seen and `done` in one transaction.

`store.turns` runs each call as one store operation (core.py: serialised, StoreClosed after close).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, cast

from . import keys
from .core import Core, Part, operation
from .ids import new_id, now_ms
from .members import Members
from .messages import Messages
from .records import TURN_COLUMNS, Message, TurnRecord
from .schema import select
from .turn_states import (
    CLAIMED,
    DONE,
    DROPPED,
    ENDED,
    FINISHING,
    INTERRUPTED,
    LIVE,
    NOT_BEGUN,
    POSTED,
    PROMPTED,
    PROMPTING,
    TAKEN,
    TERMINAL,
)
from .txns import Transactions

__all__ = [
    "CLAIMED",
    "DONE",
    "DROPPED",
    "ENDED",
    "FINISHING",
    "INTERRUPTED",
    "LIVE",
    "NOT_BEGUN",
    "POSTED",
    "PROMPTED",
    "PROMPTING",
    "TAKEN",
    "TERMINAL",
    "Turns",
    "claimed_in",
]


def _record(row: tuple) -> TurnRecord:
    values = dict(zip(TURN_COLUMNS, row))
    try:
        answer = tuple(e for e in json.loads(values["answer"] or "[]") if isinstance(e, str))
    except (ValueError, TypeError):
        answer = ()
    try:
        final = json.loads(values["final"]) if values["final"] else None
    except ValueError:
        final = None
    return TurnRecord(
        **{
            **values,
            "alone": bool(values["alone"]),
            "attempt": int(values["attempt"] or 0),
            "answer": answer,
            "final": final if isinstance(final, dict) else None,
        }
    )


def claimed_in(turn: TurnRecord, run: str) -> bool:
    """The turn was claimed for `run` when it was taken (`Turns.take(claim_first=True)`)."""
    return turn.state == CLAIMED and turn.run == run and turn.attempt == 1


class Turns(Part):
    def __init__(self, core: Core, txns: Transactions, messages: Messages, members: Members) -> None:
        super().__init__(core)
        self.txns = txns
        self.messages = messages
        self.members = members

    @operation
    def take(
        self,
        channel_id: str,
        sender: str,
        stored_text: str,
        event_id: str,
        turns: Sequence[tuple[str, str, bool]],
        run: str,
        conversation: str = "",
        turns_in: str | None = None,
        claim_first: bool = False,
    ) -> tuple[Message, list[TurnRecord]] | None:
        """Store the owner message `event_id` in `conversation` and its turns ((agent, text,
        alone), in order) in `turns_in` (None: the same; a thread under the message itself when
        the channel opens threads, `!threads on`); None if that message is stored already (the
        homeserver sent it again). Either way the event is recorded as handled
        (keys.handled_event), in the same transaction. With `claim_first` (its conversation has
        nothing queued or running) the first turn is claimed for `run` in that transaction too:
        its worker starts it without a write of its own (`claimed_in`)."""
        with self.core.db.atomic():
            # the event counts as handled in the same transaction (the dispatcher's record of it,
            # keys.handled_event): one write fewer before its turns start
            self.txns.mark_txn(keys.handled_event(event_id))
            if self.core.queries.by_event.rows(event_id=event_id):
                return None
            message = self.messages.add_message(channel_id, sender, "user", stored_text, [event_id], conversation)
            where = conversation if turns_in is None else turns_in
            return message, self.insert(channel_id, event_id, message.id, turns, run, where, claim_first)

    @operation
    def add(
        self,
        channel_id: str,
        prompt_event: str,
        message_id: str | None,
        turns: Sequence[tuple[str, str, bool]],
        run: str,
        conversation: str = "",
    ) -> list[TurnRecord]:
        """Turns of an already stored prompt (a message routed again at start); the ones that
        exist already are left as they are."""
        with self.core.db.atomic():
            return self.insert(channel_id, prompt_event, message_id, turns, run, conversation)

    @operation
    def insert(
        self,
        channel_id: str,
        prompt_event: str,
        message_id: str | None,
        turns: Iterable[tuple[str, str, bool]],
        run: str,
        conversation: str,
        claim_first: bool = False,
    ) -> list[TurnRecord]:
        """New turns of one prompt ((agent, text, alone), an agent once), taken for `run`; with
        `claim_first`, the first one claimed (`take`). Inside a transaction of the caller's."""
        now = now_ms()
        made: list[TurnRecord] = []
        agents: set[str] = set()
        for agent, text, alone in turns:
            if agent in agents:
                continue
            agents.add(agent)
            turn_id = new_id()
            claimed = claim_first and not made  # the first turn, when its worker is free to start it
            row: dict[str, Any] = dict(
                id=turn_id,
                channel_id=channel_id,
                conversation=conversation,
                prompt_event=prompt_event,
                agent=agent,
                message_id=message_id,
                text=text,
                alone=bool(alone),
                state=CLAIMED if claimed else TAKEN,
                run=run,
                attempt=1 if claimed else 0,
            )
            self._new_row(row, now)  # a new id: never there already
            made.append(TurnRecord(**row, answer=(), final=None))  # as read back, without reading it
        return made

    def _new_row(self, row: dict[str, Any], updated: int) -> None:
        """A new turn's row written: its SQL is written once (compiled.py), one per value of
        `alone` (a boolean is no text to stand in for) — every owner message's way."""
        T, alone = self.core.models.Turn, row["alone"]
        names = [name for name in row if name != "alone"]
        insert = self.core.compiled(
            ("new turn", alone, tuple(names)),
            lambda **values: T.insert(**values, alone=alone, answer="[]"),
            *names,
            "updated",
        )
        insert.run(**{name: row[name] for name in names}, updated=updated)

    @operation
    def hand_off(
        self, channel_id: str, conversation: str, key: str, agent: str, request: str, run: str
    ) -> TurnRecord | None:
        """A handed turn (bridge/channels/turns/handoffs.py): `agent` answers `request` next in
        `conversation`, its prompt key `key` naming the turn that handed it. None when that turn
        handed on already (a turn hands on once)."""
        T = self.core.models.Turn
        with self.core.db.atomic():
            if T.select(T.id).where(T.prompt_event == key).exists():
                return None
            made = self.insert(channel_id, key, None, [(agent, request, False)], run, conversation)
            return made[0] if made else None

    @operation
    def drop_handoffs(self, channel_id: str, conversation: str, prefix: str) -> int:
        """The handed turns of `conversation` not begun never start (an owner message, `!stop`
        or a budget ended their chain): how many."""
        T = self.core.models.Turn
        # its SQL written once per prefix (compiled.py): every owner message runs it
        drop = self.core.compiled(
            ("drop handoffs", prefix),
            lambda channel_id, conversation, updated: T.update(state=DROPPED, updated=updated).where(
                (T.channel_id == channel_id)
                & (T.conversation == conversation)
                & T.prompt_event.startswith(prefix)
                & T.state.in_(list(NOT_BEGUN))
            ),
            "channel_id",
            "conversation",
            "updated",
        )
        cursor = drop.run(channel_id=channel_id, conversation=conversation, updated=now_ms())
        return cursor.rowcount

    @operation
    def claim(self, turn_id: str, run: str) -> TurnRecord | None:
        """Start the turn in `run`: the record, or None if it must not start (this run claimed
        it already, it has begun in an earlier run, it is over)."""
        T = self.core.models.Turn
        with self.core.db.atomic():
            claimable = (T.state == TAKEN) | (T.state.in_([CLAIMED, POSTED]) & (T.run != run))
            changed = (
                T.update(state=CLAIMED, run=run, attempt=T.attempt + 1, updated=now_ms())
                .where((T.id == turn_id) & claimable)
                .execute()
            )
            return self.get(turn_id) if changed else None

    def release(self, turn_id: str) -> None:
        """A claimed turn whose prompt never reached the agent (the bridge stops): the next
        run claims it again."""
        self._step(turn_id, {"state": TAKEN}, NOT_BEGUN)

    def posted(self, turn_id: str, answer: Sequence[str]) -> None:
        self._step(turn_id, {"state": POSTED, "answer": json.dumps(list(answer))}, (CLAIMED,))

    def set_answer(self, turn_id: str, answer: Sequence[str]) -> None:
        """The answer's messages so far (a new one after a split)."""
        self._step(turn_id, {"answer": json.dumps(list(answer))}, LIVE)

    def prompting(self, turn_id: str, answer: Sequence[str]) -> None:
        """The prompt is about to be written to the agent (so it is never written twice: a start
        after a stop here marks the answer interrupted, saying the message may not have reached
        the agent)."""
        self._step(turn_id, {"state": PROMPTING, "answer": json.dumps(list(answer))}, NOT_BEGUN)

    def prompted(self, turn_id: str, answer: Sequence[str]) -> None:
        """The prompt was written to the agent."""
        self._step(turn_id, {"state": PROMPTED, "answer": json.dumps(list(answer))}, (*NOT_BEGUN, PROMPTING))

    def finishing(self, turn_id: str, final: dict, answer: Sequence[str]) -> None:
        """The final text is about to be sent (`final`: how, so that it can be sent again)."""
        self._step(
            turn_id,
            {"state": FINISHING, "final": json.dumps(final, sort_keys=True), "answer": json.dumps(list(answer))},
            (PROMPTING, PROMPTED, FINISHING),
        )

    @operation
    def _step(self, turn_id: str, values: dict, states: Sequence[str]) -> None:
        """A turn's step (prompting, prompted…) from one of `states`: its SQL is written once per
        kind of step (compiled.py) — the steps before a prompt are on every owner message's way."""
        T = self.core.models.Turn
        step = self.core.compiled(
            ("turn step", tuple(values), tuple(states)),
            lambda id, updated, **set_: T.update(**set_, updated=updated).where(
                (T.id == id) & T.state.in_(list(states))
            ),
            "id",
            "updated",
            *values,
        )
        step.run(id=turn_id, updated=now_ms(), **values)

    @operation
    def answered(
        self, turn_id: str, channel_id: str, agent: str, text: str, event_ids: Sequence[str], seen_upto: str | None
    ) -> Message | None:
        """Store the answer, what `agent` has seen (up to `seen_upto`) and the turn done, in one
        transaction; None if the turn was done already (nothing written twice)."""
        T = self.core.models.Turn
        with self.core.db.atomic():
            row = T.select(T.state, T.conversation).where(T.id == turn_id).tuples().first()
            if row is not None and row[0] in TERMINAL:
                return None
            conversation = (row[1] or "") if row is not None else ""  # the answer goes where its turn is
            message = self.messages.add_message(channel_id, agent, "agent", text, list(event_ids), conversation)
            if seen_upto is not None:
                self.members.mark_seen(channel_id, agent, seen_upto, conversation)
            T.update(state=DONE, answer=json.dumps(list(event_ids)), final=None, updated=now_ms()).where(
                T.id == turn_id
            ).execute()
            return message

    @operation
    def end(
        self, turn_id: str, state: str, answer: Sequence[str] = (), seen: tuple[str, str, str] | None = None
    ) -> None:
        """The turn is over without a stored answer (`ended`, `interrupted` or `dropped`);
        `seen` (channel, agent, message id) is written with it."""
        if state not in (ENDED, INTERRUPTED, DROPPED):
            raise ValueError(f"not an end state: {state!r}")
        T = self.core.models.Turn
        with self.core.db.atomic():
            values = {"state": state, "updated": now_ms(), "final": None}
            if answer:
                values["answer"] = json.dumps(list(answer))
            T.update(**values).where((T.id == turn_id) & T.state.in_(list(LIVE))).execute()
            if seen is not None:  # in the turn's conversation
                channel_id, agent, message_id = seen
                row = T.select(T.conversation).where(T.id == turn_id).tuples().first()
                self.members.mark_seen(channel_id, agent, message_id, (row[0] or "") if row is not None else "")

    @operation
    def drop_prompt(self, prompt_event: str) -> int:
        """The owner withdrew the message: its turns that have not begun never start."""
        T = self.core.models.Turn
        return (
            T.update(state=DROPPED, updated=now_ms())
            .where((T.prompt_event == prompt_event) & T.state.in_(list(NOT_BEGUN)))
            .execute()
        )

    @operation
    def drop(self, turn_id: str) -> bool:
        """The owner dropped a waiting turn (`!drop`): it never starts, now or after a restart.
        When no other turn of its message is left, the message is forgotten too, so that no
        agent is told it later as context. False: it had begun (or was over) — nothing changed."""
        T = self.core.models.Turn
        with self.core.db.atomic():
            row = T.select(T.prompt_event).where(T.id == turn_id).tuples().first()
            changed = (
                T.update(state=DROPPED, updated=now_ms())
                .where((T.id == turn_id) & T.state.in_(list(NOT_BEGUN)))
                .execute()
            )
            if not changed or row is None:
                return False
            others = T.select(T.id).where((T.prompt_event == row[0]) & (T.state != DROPPED)).count()
            if not others:
                self.messages.delete_message_by_event(row[0])
            return True

    @operation
    def get(self, turn_id: str) -> TurnRecord | None:
        rows = self.core.queries.turn.rows(id=turn_id)
        return _record(rows[0]) if rows else None

    @operation
    def unfinished(self) -> list[TurnRecord]:
        """Every turn not over, oldest first."""
        T = self.core.models.Turn
        return self._records(T.state.in_(list(LIVE)))

    @operation
    def in_channel(self, channel_id: str) -> list[TurnRecord]:
        """Every turn of the channel, oldest first (over or not)."""
        return self._records(self.core.models.Turn.channel_id == channel_id)

    def _records(self, where) -> list[TurnRecord]:
        T = self.core.models.Turn
        query = select(T, TURN_COLUMNS).where(where).order_by(T.id)
        rows = cast(Iterable[tuple], query.tuples())  # peewee's types say models: these are tuples
        return [_record(row) for row in rows]

    @operation
    def last_live_agent(self, channel_id: str, conversation: str = "") -> str | None:
        """The agent of the newest turn of the conversation that is not over: the one who will
        have spoken last once the queue is answered (routing's last speaker)."""
        rows = self.core.queries.last_live_agent.rows(channel_id=channel_id, conversation=conversation)
        return rows[0][0] if rows else None
