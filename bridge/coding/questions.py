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

`Questions.ask()` is the turn's elicitation callback; its `asks` see owner messages before they
become prompts (inbound.py). Asking and waiting is channels/asks/asks.py's, shared with
permission requests; what is here is what a question asks and how its answer reads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from acp import ElicitationAnswer, ElicitationRequest
from acp.elicitation import ACCEPT, CANCEL, DECLINE, parse_answer

from ..channels.asks.asks import Ask, Asking, Asks
from ..channels.base.parts import AskedIn
from . import render

if TYPE_CHECKING:
    from config import Config

    from ..channels.base.notices import Notices

DECLINE_WORDS = {"decline", "no", "n", "cancel", "refuse", "skip"}
YES_WORDS = {"yes", "y", "ok", "okay", "open", "accept"}
WITHDRAWN = "⏹ Withdrawn by the agent"
TIMED_OUT = "⏱ No answer: declined"


class Questions:
    def __init__(self, config: Config, notices: Notices):
        self.asks = Asks(config, notices, "question")

    async def ask(self, where: AskedIn, request: ElicitationRequest) -> ElicitationAnswer | None:
        """Ask the owner where `where` says (channels/base/parts.py); the answer, or None."""
        run = where.run if where.run is not None else where.portal.current
        title = where.puppet.displayname
        shown = render.url_consent(title, request) if request.mode == "url" else render.elicitation(title, request)

        async def answered(ask: Ask) -> tuple[ElicitationAnswer, str]:
            result = await self._answer(ask, request)
            return result, render.elicitation_outcome(result.action)

        def stopped() -> str:
            # the agent withdrew it, or the turn was stopped (acp answers "decline" for us)
            return (
                render.elicitation_outcome(DECLINE) + " (the answer was stopped)"
                if getattr(run, "cancelled", False)
                else WITHDRAWN
            )

        # not posted: the owner cannot be asked
        waiting = f"❓ waiting for your answer to {title}'s question"
        asking = Asking(
            shown, waiting, answered, (ElicitationAnswer(DECLINE), TIMED_OUT), stopped, ElicitationAnswer(CANCEL)
        )
        return await self.asks.ask(replace(where, run=run), asking)

    async def _answer(self, ask: Ask, request: ElicitationRequest) -> ElicitationAnswer:
        while True:
            reply = (await ask.replies.get()).strip()
            word = reply.lower().rstrip(".!")
            if request.mode == "url":
                if word in YES_WORDS:
                    await self.asks.send(ask, render.url_link(request).content())
                    return ElicitationAnswer(ACCEPT)
                if word in DECLINE_WORDS:
                    return ElicitationAnswer(DECLINE)
                await self.asks.say(ask, "Reply `yes` to get the link, or `no` to decline.")
                continue
            if word in DECLINE_WORDS and not (len(request.fields) == 1 and request.fields[0].type == "boolean"):
                return ElicitationAnswer(DECLINE)
            content, problems = parse_answer(request.fields, reply)
            if not problems:
                return ElicitationAnswer(ACCEPT, content)
            await self.asks.say(
                ask, "That answer does not fit: " + "; ".join(problems) + ". Reply again, or `decline`."
            )
