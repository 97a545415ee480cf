"""An agent's questions to the owner (ACP `elicitation/create`), asked in the channel.

* Form mode: the puppet posts the fields as a numbered message (render.elicitation); the owner
  answers with a reply to it (or, with no reply, the message after it in that room): `1.
  answer` per line, or just the answer when there is one field; `decline` refuses. An answer
  that does not fit (a missing required field, a number out of range) gets one line saying
  what, and the question stays open.
* URL mode: the puppet first names only the host and asks for consent; `yes` posts the link
  and accepts, `no` declines.
* After `config.permission_timeout` seconds the question is declined; `!stop` (ACP's
  cancellation: acp/client.py answers for the owner) declines too; an agent withdrawing its
  request (`$/cancel_request`) closes the question. The question's message is edited to say how
  it ended.

`Questions.ask()` is the turn's elicitation callback; `Questions.on_reply()` sees owner messages
before they become prompts (inbound.py).
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from acp import ElicitationAnswer, ElicitationRequest
from acp.elicitation import ACCEPT, CANCEL, DECLINE, parse_answer

from ..matrix.client import MatrixError
from . import render

if TYPE_CHECKING:
    from config import Config

    from ..channels.notices import Notices
    from ..channels.portal import Portal
    from ..matrix.puppet import Puppet

log = logging.getLogger(__name__)

DECLINE_WORDS = {"decline", "no", "n", "cancel", "refuse", "skip"}
YES_WORDS = {"yes", "y", "ok", "okay", "open", "accept"}
WITHDRAWN = "⏹ Withdrawn by the agent"
TIMED_OUT = "⏱ No answer: declined"


@dataclass
class Question:
    room_id: str
    event_id: str
    request: ElicitationRequest
    puppet: Any
    replies: asyncio.Queue = field(default_factory=asyncio.Queue)


class Questions:
    def __init__(self, config: "Config", notices: "Notices"):
        self.config, self.notices = config, notices
        self.open: list[Question] = []   # oldest first

    async def ask(self, portal: "Portal", puppet: "Puppet", request: ElicitationRequest) -> ElicitationAnswer | None:
        title = puppet.displayname
        shown = (render.url_consent(title, request) if request.mode == "url"
                 else render.elicitation(title, request))
        event_id = await self._send(puppet, portal.room_id, shown.content())
        if event_id is None:
            return ElicitationAnswer(CANCEL)  # the owner cannot be asked
        question = Question(portal.room_id, event_id, request, puppet)
        self.open.append(question)
        answer = getattr(portal.current, "answer", None)
        previous = answer.status if answer is not None else None
        waiting = f"❓ waiting for your answer to {title}'s question"
        if answer is not None:
            answer.set_status(waiting)
        outcome = TIMED_OUT
        try:
            result = await asyncio.wait_for(self._answer(question),
                                            self.config.permission_timeout)
            outcome = render.elicitation_outcome(result.action)
            return result
        except asyncio.TimeoutError:
            return ElicitationAnswer(DECLINE)
        except asyncio.CancelledError:
            # the agent withdrew it, or the turn was stopped (acp answers "decline" for us)
            outcome = render.elicitation_outcome(DECLINE) + " (the answer was stopped)" \
                if getattr(portal.current, "cancelled", False) else WITHDRAWN
            raise
        finally:
            if question in self.open:
                self.open.remove(question)
            if answer is not None and answer.status == waiting:
                answer.set_status(previous)
            closed = {"msgtype": "m.text", "body": f"{shown.body}\n\n{outcome}",
                      "format": "org.matrix.custom.html",
                      "formatted_body": f"{shown.html}<p><strong>{render._e(outcome)}</strong></p>"}
            await asyncio.shield(self._edit(puppet, portal.room_id, event_id, closed))

    async def _answer(self, question: Question) -> ElicitationAnswer:
        request = question.request
        while True:
            reply = (await question.replies.get()).strip()
            word = reply.lower().rstrip(".!")
            if request.mode == "url":
                if word in YES_WORDS:
                    await self._send(question.puppet, question.room_id, render.url_link(request).content())
                    return ElicitationAnswer(ACCEPT)
                if word in DECLINE_WORDS:
                    return ElicitationAnswer(DECLINE)
                await self._say(question, "Reply `yes` to get the link, or `no` to decline.")
                continue
            if word in DECLINE_WORDS and not (len(request.fields) == 1 and request.fields[0].type == "boolean"):
                return ElicitationAnswer(DECLINE)
            content, problems = parse_answer(request.fields, reply)
            if not problems:
                return ElicitationAnswer(ACCEPT, content)
            await self._say(question, "That answer does not fit: " + "; ".join(problems)
                            + ". Reply again, or `decline`.")

    def on_reply(self, room_id: str, body: str, reply_to: str | None, loose: bool = True) -> bool:
        """An owner's message: True when it answers an open question — a reply to it, or (with
        `loose`) the room's latest open question when the message replies to nothing."""
        here = [q for q in self.open if q.room_id == room_id]
        if not here or (reply_to is None and not loose):
            return False
        if reply_to is not None:
            question = next((q for q in here if q.event_id == reply_to), None)
            if question is None:
                return False
        else:
            question = here[-1]
        question.replies.put_nowait(body)
        return True

    async def _say(self, question: Question, text: str) -> None:
        await self.notices.send(question.puppet, question.room_id, text)

    @staticmethod
    async def _send(puppet: "Puppet", room_id: str, content: dict) -> str | None:
        try:
            return await puppet.intent.send(room_id, content)
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("could not ask a question in %s: %s", room_id, exc)
        return None

    @staticmethod
    async def _edit(puppet: "Puppet", room_id: str, event_id: str, content: dict) -> None:
        try:
            await puppet.intent.edit(room_id, event_id, content)
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("could not close a question in %s: %s", room_id, exc)

