"""At start, the turns an earlier run left unfinished are carried on (docs/reliability.md "Exactly once").

Every turn is a record (store/turns.py) that says how far it got; recovery_plan.py decides from
those records alone what each needs, and this carries it out, before any portal starts its queue:
- never begun: queued again in its place (oldest first, before anything newer), its placeholder
  found again by its transaction id and taken over;
- begun and cut: its message edited once to say it was interrupted (the edit's transaction id is
  derived from the event, so a crash in between never posts it twice), never prompted again;
- its final text on its way: that send repeated with the same transaction id (nothing is posted
  twice, a finished answer is never marked interrupted), and the answer stored.

A turn this run took is never touched here: which run took or claimed a turn is in its record.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from store.schedules import parse_run_key
from store.turns import DROPPED, INTERRUPTED

from ...matrix.puppet import relating
from ..base.conversations import relation_for
from ..base.stream import message_content
from ..turns.handoffs import parse_handoff_key
from ..turns.incoming import Incoming
from .recovery_plan import Drop, Interrupt, Refinish, Route, Run, plan

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from ...matrix.identities import Identities
    from ..base.registry import Channels

log = logging.getLogger(__name__)

INTERRUPTED_TEXT = "⚠️ interrupted: the bridge stopped before this answer was finished"
UNSURE_TEXT = (
    "⚠️ interrupted: the bridge stopped just as your message was being handed to the agent; "
    "it may not have reached it — send it again if you still want an answer"
)
MARK = "⚠️ interrupted"
STATUS_PREFIXES = ("⏳", "💭", "✍️", "🔧", "⏸")


def _q(value: str) -> str:
    return quote(value, safe="")


def shown_text(body: str) -> str:
    """The answer text of a streamed message body, without its status line."""
    head, sep, rest = body.partition("\n\n")
    if head.startswith(STATUS_PREFIXES):
        return rest if sep else ""
    return "" if body == "…" else body


def interrupted_text(body: str, mark: str = INTERRUPTED_TEXT) -> str:
    """The text shown so far, as it was (up to its last character), then the mark."""
    text = shown_text(body).rstrip("\n")
    return f"{text}\n\n{mark}" if text.strip() else mark


@dataclass
class Recovered:
    interrupted: int = 0  # answers cut by the last stop, now marked so
    rerun: int = 0  # turns that had not begun, queued again
    refinished: int = 0  # answers whose final text was on its way, finished now
    dropped: int = 0


class Recovery:
    def __init__(self, db: OffLoop, config: Config, channels: Channels, identities: Identities, run_id: str):
        self.db, self.config, self.channels, self.identities = db, config, channels, identities
        self.run_id = run_id  # this run's: the turns it takes again are marked with it

    async def start(self) -> Recovered:
        """Carry out the plan for every unfinished turn of earlier runs."""
        db = self.db
        done = Recovered()
        channels = {channel.id: channel for channel in await db.channels()}
        for action in plan(await db.turns.unfinished(), self.run_id, set(self.config.agents), set(channels)):
            turn = action.turn
            try:
                if isinstance(action, Drop):
                    log.info("turn %s dropped: %s", turn.id, action.why)
                    await db.turns.end(turn.id, DROPPED)
                    done.dropped += 1
                elif isinstance(action, Run):
                    done.rerun += await self._queue(channels[turn.channel_id].room_id, [turn])
                elif isinstance(action, Route):
                    done.rerun += await self._route(channels[turn.channel_id].room_id, turn)
                elif isinstance(action, Interrupt):
                    done.interrupted += await self._interrupt(
                        channels[turn.channel_id].room_id, turn, UNSURE_TEXT if action.unsure else INTERRUPTED_TEXT
                    )
                elif isinstance(action, Refinish):
                    await self._refinish(channels[turn.channel_id].room_id, turn)
                    done.refinished += 1
            except Exception:
                log.exception("turn %s could not be recovered; trying again at the next start", turn.id)
        return done

    async def _incoming(self, turn):
        if parse_run_key(turn.prompt_event) is not None or parse_handoff_key(turn.prompt_event) is not None:
            # a scheduled run, a handed turn: its prompt is the turn's text
            return Incoming(None, turn.prompt_event, turn.text, resumed=True)
        message = await self.db.message_by_event(turn.prompt_event)
        if message is None:
            return None
        # its sender, as stored: the owner who answers the turn's asks after the restart too
        return Incoming(message.id, turn.prompt_event, message.text, resumed=True, sender=message.sender)

    async def _queue(self, room_id: str, turns) -> int:
        portal = await self.channels.portal_for(room_id)
        queued = 0
        for turn in turns:
            incoming = await self._incoming(turn) if portal is not None else None
            if incoming is None:  # redacted meanwhile (the store forgot it), or the channel is gone
                await self.db.turns.end(turn.id, DROPPED)
                continue
            portal.submit(turn, incoming)
            queued += 1
        return queued

    async def _route(self, room_id: str, turn) -> int:
        """A message an older store left half answered: routed again, without the agents whose
        answer had begun or ended."""
        db = self.db
        portal, incoming = await self.channels.portal_for(room_id), await self._incoming(turn)
        if portal is None or incoming is None:
            await db.turns.end(turn.id, DROPPED)
            return 0
        try:
            skip = set(json.loads(turn.text))
        except (ValueError, TypeError):
            skip = set()
        decision = await portal.route(incoming.body, None, [], turn.conversation)
        made = await db.turns.add(
            portal.channel.id,
            turn.prompt_event,
            incoming.message_id,
            [(t.agent, t.text, t.alone) for t in decision.answerers if t.agent not in skip],
            self.run_id,
            turn.conversation,
        )
        await db.turns.end(turn.id, DROPPED)
        return await self._queue(room_id, made)

    async def _interrupt(self, room_id: str, turn, mark: str) -> int:
        """Mark the cut answer interrupted, once; its turn is over."""
        answer = list(turn.answer)
        if not answer:  # the prompt went before the placeholder's send came back
            event_id = await self._event_of(room_id, turn)
            answer = [event_id] if event_id else []
        marked = await self._repair_one(room_id, turn.agent, answer[-1], mark) if answer else False
        seen = None if turn.alone or turn.message_id is None else (turn.channel_id, turn.agent, turn.message_id)
        await self.db.turns.end(turn.id, INTERRUPTED, answer, seen)
        return int(marked)

    async def _refinish(self, room_id: str, turn) -> None:
        """The final text was being sent when the last run stopped: send it again with the same
        transaction id (the homeserver gives back the first one if it landed), then store it."""
        final = turn.final
        puppet = await self._puppet(room_id, turn)
        answer = [e for e in final.get("answer") or turn.answer if isinstance(e, str)]
        content = final.get("content") if isinstance(final.get("content"), dict) else {"msgtype": "m.text", "body": ""}
        txn = str(final.get("txn") or f"sk-{turn.id}-final")
        if isinstance(final.get("event"), str):
            await puppet.intent.edit(room_id, final["event"], content, txn_id=txn)
        else:
            event_id = await puppet.intent.send(room_id, content, txn_id=txn)
            if event_id not in answer:
                answer.append(event_id)
        seen_upto = None if turn.alone else turn.message_id
        await self.db.turns.answered(
            turn.id, turn.channel_id, turn.agent, str(final.get("text") or ""), answer, seen_upto
        )
        log.info("the answer of turn %s in %s finished after the restart", turn.id, room_id)

    async def _event_of(self, room_id: str, turn) -> str | None:
        """The event the placeholder send made. Sending it again with the same transaction id
        returns the first one's event id (or, if the first never got there, posts it now — then
        it is marked interrupted like the others)."""
        puppet = await self._puppet(room_id, turn)
        return await puppet.intent.send(room_id, {"msgtype": "m.text", "body": "⏳"}, txn_id=f"sk-{turn.id}")

    async def _puppet(self, room_id: str, turn):
        """The turn's puppet, its new messages going into the turn's conversation (turns.py)."""
        puppet = await self.identities.puppet(turn.agent)
        return relating(puppet, room_id, relation_for(turn.conversation, turn.prompt_event))

    async def _repair_one(self, room_id: str, agent: str, event_id: str, mark: str = INTERRUPTED_TEXT) -> bool:
        if await self.db.message_by_event(event_id) is not None:
            return False  # it was finished and stored after all
        puppet = await self.identities.puppet(agent)
        body = await self._latest_body(puppet.intent, room_id, event_id)
        if body is None or MARK in body:
            return False  # gone, or the graceful stop already said so
        txn = "sk-interrupted-" + hashlib.sha256(event_id.encode()).hexdigest()[:32]
        await puppet.intent.edit(room_id, event_id, message_content(interrupted_text(body, mark), None), txn_id=txn)
        log.info("marked answer %s in %s as interrupted", event_id, room_id)
        return True

    @staticmethod
    async def _latest_body(intent, room_id: str, event_id: str) -> str | None:
        """The body shown now: the newest edit's, else the original's. None if the event is gone."""
        status, reply = await intent.request(
            "GET", f"/_matrix/client/v1/rooms/{_q(room_id)}/relations/{_q(event_id)}/m.replace?dir=b&limit=50"
        )
        if status == 200:
            # dir=b: newest first
            edits = [e for e in reply.get("chunk") or [] if e.get("sender") == intent.user_id]
            if edits:
                new = (edits[0].get("content") or {}).get("m.new_content") or {}
                if isinstance(new.get("body"), str):
                    return new["body"]
        status, reply = await intent.request("GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/event/{_q(event_id)}")
        if status in (403, 404):
            return None
        if status != 200:
            raise RuntimeError(f"reading {event_id}: {status} {reply.get('error', reply)}")
        body = (reply.get("content") or {}).get("body")
        return body if isinstance(body, str) else ""
