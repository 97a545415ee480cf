"""An agent's questions to the owner (ACP `elicitation/create`), asked in the channel.

* Form mode: the puppet posts the fields as a numbered message (render.elicitation); the owner
  answers with a reply to it (or, with no reply, the message after it in that room): `1.
  answer` per line, or just the answer when there is one field; `decline` refuses. An answer
  that does not fit (a missing required field, a number out of range) gets one line saying
  what, and the question stays open.
* URL mode: the puppet first names only the host and asks for consent; `yes` posts the link
  and accepts, `no` declines. The question then says the owner is to finish on that host; when
  the agent sends `elicitation/complete` it is edited to say it is done. If that comes while the
  question still waits (the owner finished it elsewhere: another client, the agent's CLI), the
  question is closed as done there and the agent gets `accept` (the interaction took place).
* After `config.permission_timeout` seconds the question is declined; `!stop` (ACP's
  cancellation: acp/client.py answers for the owner) declines too; an agent withdrawing its
  request (`$/cancel_request`) closes the question. The question's message is edited to say how
  it ended.

`Questions.ask()` is the turn's elicitation callback; its `asks` see owner messages before they
become prompts (inbound.py). Asking and waiting is channels/asks/asks.py's, shared with
permission requests; what is here is what a question asks and how its answer reads.
"""

from __future__ import annotations

import asyncio
import logging
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

log = logging.getLogger(__name__)

DECLINE_WORDS = {"decline", "no", "n", "cancel", "refuse", "skip"}
YES_WORDS = {"yes", "y", "ok", "okay", "open", "accept"}
WITHDRAWN = "⏹ Withdrawn by the agent"
TIMED_OUT = "⏱ No answer: declined"


class Questions:
    def __init__(self, config: Config, notices: Notices):
        self.config = config
        self.asks = Asks(config, notices, "question")
        self._watching: set[asyncio.Task] = set()  # URL questions waiting for elicitation/complete

    async def ask(self, where: AskedIn, request: ElicitationRequest) -> ElicitationAnswer | None:
        """Ask the owner where `where` says (channels/base/parts.py); the answer, or None."""
        run = where.run if where.run is not None else where.portal.current
        title = where.puppet.displayname
        shown = render.url_consent(title, request) if request.mode == "url" else render.elicitation(title, request)

        async def answered(ask: Ask) -> tuple[ElicitationAnswer, str]:
            result, outcome = await self._answer(ask, request)
            if outcome is None and result.action == ACCEPT and request.completed is not None:
                outcome = render.url_waiting(request)
                self._watch(ask, request, title)
            return result, outcome or render.elicitation_outcome(result.action)

        def stopped() -> str:
            elsewhere = getattr(request, "answered_elsewhere", None)  # by an attached ACP client first
            if elsewhere:  # (bridge/attach/hub.py)
                return elsewhere
            # the agent withdrew it, or the turn was stopped (acp answers "decline" for us)
            return (
                render.elicitation_outcome(DECLINE) + " (the answer was stopped)"
                if getattr(run, "cancelled", False)
                else WITHDRAWN
            )

        # not posted: the owner cannot be asked
        waiting = f"❓ waiting for your answer to {title}'s question"
        asking = Asking(
            shown,
            waiting,
            answered,
            (ElicitationAnswer(DECLINE), TIMED_OUT),
            stopped,
            ElicitationAnswer(CANCEL),
            on_posted=getattr(request, "on_posted", None),
        )
        return await self.asks.ask(replace(where, run=run), asking)

    async def _answer(self, ask: Ask, request: ElicitationRequest) -> tuple[ElicitationAnswer, str | None]:
        """The owner's answer, and the line the question ends with when it is not the action's."""
        while True:
            said = await _next_words(ask, request)
            if said is None:  # URL mode: the agent says it is complete, finished elsewhere
                return ElicitationAnswer(ACCEPT), render.url_done(request, elsewhere=True)
            reply = said.strip()
            word = reply.lower().rstrip(".!")
            if request.mode == "url":
                if word in YES_WORDS:
                    await self.asks.send(ask, render.url_link(request).content())
                    return ElicitationAnswer(ACCEPT), None
                if word in DECLINE_WORDS:
                    return ElicitationAnswer(DECLINE), None
                await self.asks.say(ask, "Reply `yes` to get the link, or `no` to decline.")
                continue
            if word in DECLINE_WORDS and not (len(request.fields) == 1 and request.fields[0].type == "boolean"):
                return ElicitationAnswer(DECLINE), None
            content, problems = parse_answer(request.fields, reply)
            if not problems:
                return ElicitationAnswer(ACCEPT, content), None
            await self.asks.say(
                ask, "That answer does not fit: " + "; ".join(problems) + ". Reply again, or `decline`."
            )

    def _watch(self, ask: Ask, request: ElicitationRequest, title: str) -> None:
        """After a `yes`: once the agent sends elicitation/complete, the question says it is
        done (it waits as long as a question does, `permission_timeout`)."""

        async def watch() -> None:
            assert request.completed is not None
            try:
                await asyncio.wait_for(request.completed.wait(), self.config.permission_timeout)
            except TimeoutError:
                return
            await self.asks.show_end(ask, render.url_done(request, elsewhere=False))

        task = asyncio.get_running_loop().create_task(watch())
        self._watching.add(task)
        task.add_done_callback(self._watched)

    def _watched(self, task: asyncio.Task) -> None:
        self._watching.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("a URL question could not be shown done: %s", task.exception())

    async def close(self) -> None:
        """The bridge stops: no URL question is watched any more."""
        for task in list(self._watching):
            task.cancel()
        await asyncio.gather(*self._watching, return_exceptions=True)


async def _next_words(ask: Ask, request: ElicitationRequest) -> str | None:
    """The owner's next words for the question; None when, first, the agent sent
    elicitation/complete for it (URL mode)."""
    if request.completed is None:
        return await ask.replies.get()
    if request.completed.is_set():
        return None
    words = asyncio.ensure_future(ask.replies.get())
    completed = asyncio.ensure_future(request.completed.wait())
    try:
        await asyncio.wait({words, completed}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (words, completed):
            if not waiting.done():
                waiting.cancel()
    return words.result() if words.done() and not words.cancelled() else None
