"""Asking the owner something in a channel and waiting for the answer
(docs/architecture.md "Streaming, permissions and cancel"): the one mechanism behind an agent's
permission requests (permissions.py) and its questions (coding/questions.py). Each kind keeps only
what it asks and how it reads the answer.

An ask is one message from the agent's puppet. While it is open, the answer's status line says
the agent waits. The owner answers in the room:

* a numbered choice (the ask has options): with a keycap reaction on the message (1️⃣ 2️⃣ …,
  pre-added, one per option), or with a message that is only the number. A number out of
  range is refused in one line and the ask stays open; a number replying to an ask closed
  already is told so;
* in words (an ask without options): any message; the kind reads it (and may ask again).

A message replying to an ask (`m.in_reply_to`, its fallback quote stripped) answers that ask
only; a message replying to nothing answers the latest open ask of its conversation
(docs/architecture.md "Conversations and threads": the main timeline, or the thread it is in; a
thread message's fallback `m.in_reply_to` is no reply). Only owners' events are passed on.

Several owners (docs/architecture.md "Conversations and threads"): an ask is answered by the owner
whose message started the turn (the `asker`: the prompt's sender, read back from the store after a
restart), or by any owner where the channel says `!approve any-owner` (approvals.py); the ask
mentions who may answer. Another owner's keycap, number, or reply to the ask is refused in one line
from the puppet, in the ask's conversation, and changes nothing; another owner's message that
replies to nothing is no answer (it goes on as an ordinary message, so nothing of theirs is lost). A
scheduled run answers no owner's message: the agent scheduled it, and who asked the agent is not
recorded, so any owner answers. After `config.permission_timeout` seconds the ask times out; a
cancelled wait (!stop, a redaction, 🛑: ACP answers for the owner, or the agent withdrew its request)
ends it too. However it ends, the message is edited to show how, and the answer's status line comes
back.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import aiohttp

from ...matrix.client import MatrixError
from ...matrix.markdown import escape_html
from ...matrix.puppet import relating
from ..base.parts import AskedIn
from ..rules.approvals import mentioning

if TYPE_CHECKING:
    from config import Config

    from ...matrix.identities import Identities
    from ...matrix.puppet import Puppet
    from ..base.notices import Notices
    from ..base.registry import Channels

log = logging.getLogger(__name__)

KEYCAPS = [f"{n}\ufe0f\u20e3" for n in range(1, 10)] + ["🔟"]
NUMBER = re.compile(r"^\s*(\d{1,3})\s*[.)]?\s*$")
CLOSED_KEPT = 200  # closed asks remembered, so a late reply to one is answered

R = TypeVar("R")


def normalise_key(key: str) -> str:
    """A reaction key without variation selectors: clients send keycaps with or without U+FE0F."""
    return key.replace("\ufe0f", "")


_KEY_INDEX = {normalise_key(key): index for index, key in enumerate(KEYCAPS)}


class Shown(Protocol):
    """An ask as the owner reads it (coding/render.py's `Rendered`)."""

    @property
    def body(self) -> str: ...

    @property
    def html(self) -> str: ...

    def content(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Asking(Generic[R]):
    """What one kind asks (a permission, a question, a schedule's approval) and how it reads the
    answer. `wait(ask)` reads the owner's answer: (what the ask returns, the line shown under
    it). Timed out: `timed_out`; cancelled: `stopped()` is shown and the cancellation goes on;
    the message could not be posted: `unsent`, as the owner cannot be asked."""

    shown: Shown  # the message
    waiting: str  # the answer's status line while it waits
    wait: Callable[[Ask], Awaitable[tuple[R, str]]]
    timed_out: tuple[R, str]
    stopped: Callable[[], str]
    unsent: R
    options: Sequence[Any] = ()  # numbered choices; none: answered in words
    on_posted: Callable[[], Any] | None = None  # told once it is posted and open (bridge/attach/hub.py)


@dataclass
class Ask:
    room_id: str
    event_id: str  # the ask's message
    options: Sequence[Any]  # numbered choices; none: answered in words
    chosen: asyncio.Future  # the index of the option chosen
    body: str = ""
    html: str = ""
    puppet: Any = None  # who asked
    replies: asyncio.Queue = field(default_factory=asyncio.Queue)  # the owner's words, in order
    conversation: str = ""  # where it was asked: "" the main timeline, else a thread's root
    asker: str | None = None  # the owner who answers it; None: any owner (a scheduled run)

    def may_answer(self, sender: str | None) -> bool:
        """Whether `sender` (an owner) answers this ask: the owner whose message started the turn."""
        return self.asker is None or sender == self.asker

    def choose(self, index: int) -> bool:
        if not 0 <= index < len(self.options) or self.chosen.done():
            return False
        self.chosen.set_result(index)
        return True


def refusal(asker: str) -> str:
    """The line another owner's answer gets."""
    return f"Only {asker}, who started this turn, can answer this."


def answered_by(
    asks: list[Ask], room_id: str, reply_to: str | None, loose: bool = True, conversation: str = ""
) -> Ask | None:
    """The open ask a message answers: the one it replies to (if it is a reply, only that one),
    else (with `loose`) the latest of the message's conversation in the room."""
    open_here = [a for a in asks if a.room_id == room_id and not a.chosen.done()]
    if reply_to is not None:
        return next((a for a in open_here if a.event_id == reply_to), None)
    if not loose:
        return None
    open_here = [a for a in open_here if a.conversation == conversation]
    return open_here[-1] if open_here else None


class Asks:
    """The open asks of one kind (oldest first) and the last CLOSED_KEPT closed ones.

    `what` names the ask in the log. `channels` and `identities` find who tells a room that an
    ask is closed already when the ask itself is forgotten (numbered asks only)."""

    def __init__(
        self,
        config: Config,
        notices: Notices,
        what: str,
        channels: Channels | None = None,
        identities: Identities | None = None,
    ):
        self.config, self.notices, self.what = config, notices, what
        self.channels, self.identities = channels, identities
        self.open: list[Ask] = []
        self.closed: dict[str, str] = {}  # the ask's event id → how it ended

    async def ask(self, where: AskedIn, asking: Asking[R]) -> R:
        """Post what `asking` shows where `where` says (the puppet's messages go into the turn's
        conversation already), wait for the owner, show how it ended. The turn asking shows the
        wait in its answer (None: the portal's current one — conversations run side by side)."""
        portal, puppet, run = where.portal, where.puppet, where.run
        shown, waiting, wait, options = asking.shown, asking.waiting, asking.wait, asking.options
        timed_out, stopped, unsent = asking.timed_out, asking.stopped, asking.unsent
        posting = asyncio.ensure_future(
            self._sent(
                f"the {self.what}",
                portal.room_id,
                puppet.intent.send(portal.room_id, mentioning(shown.content(), where.mention)),
            )
        )
        try:
            event_id, withdrawn = await asyncio.shield(posting), False
        except asyncio.CancelledError:
            # withdrawn or stopped while it was being posted: it lands all the same (the send
            # goes on), so it is shown closed at once, never left open in the room
            event_id, withdrawn = await posting, True
        if event_id is None:
            if withdrawn:
                raise asyncio.CancelledError
            return unsent
        ask = Ask(
            portal.room_id,
            event_id,
            options,
            asyncio.get_running_loop().create_future(),
            shown.body,
            shown.html,
            puppet,
            conversation=where.conversation,
            asker=where.asker,
        )
        if withdrawn:
            ask.chosen.cancel()
            outcome = stopped()
            self._close(ask, outcome)
            await asyncio.shield(self._show_end(ask, outcome))
            raise asyncio.CancelledError
        self.open.append(ask)
        if asking.on_posted is not None:  # others may ask it too from now on
            asking.on_posted()
        answer = getattr(run if run is not None else portal.current, "answer", None)
        previous = answer.status if answer is not None else None
        if answer is not None:
            answer.set_status(waiting)
        result, outcome = timed_out
        try:
            for key in KEYCAPS[: len(options)]:
                await self._sent("a reaction", portal.room_id, puppet.intent.react(portal.room_id, event_id, key))
            try:
                result, outcome = await asyncio.wait_for(wait(ask), self.config.permission_timeout)
            except TimeoutError:
                result, outcome = timed_out
            return result
        except asyncio.CancelledError:
            outcome = stopped()
            raise
        finally:
            if ask in self.open:
                self.open.remove(ask)
            if not ask.chosen.done():
                ask.chosen.cancel()
            if answer is not None and answer.status == waiting:
                answer.set_status(previous)
            self._close(ask, outcome)
            await asyncio.shield(self._show_end(ask, outcome))

    # ---- the owner's answers ------------------------------------------------------------------

    async def on_reaction(self, room_id: str, relates_to: dict, sender: str | None = None) -> bool:
        """An owner's reaction; True when it chose an option of an open ask, or was a keycap on
        an open ask from an owner who does not answer it (refused in one line)."""
        if relates_to.get("rel_type") != "m.annotation":
            return False
        key = relates_to.get("key")
        index = _KEY_INDEX.get(normalise_key(key)) if isinstance(key, str) else None
        if index is None:
            return False
        for ask in self.open:
            if ask.room_id == room_id and ask.event_id == relates_to.get("event_id"):
                if ask.chosen.done() or index >= len(ask.options):
                    return False
                if not ask.may_answer(sender):
                    await self.say(ask, refusal(ask.asker or ""))
                    return True
                return ask.choose(index)
        return False

    async def on_number(
        self,
        room_id: str,
        body: str,
        reply_to: str | None = None,
        sender: str | None = None,
        conversation: str = "",
        relates_to: dict | None = None,
    ) -> bool:
        """An owner's message (its reply fallback stripped); True when it was a number that
        answers an ask — the one it replies to, else the latest open one of its conversation —
        or that another owner than the ask's was refused. "Closed already" goes where the
        number was typed (`relates_to`: its thread)."""
        match = NUMBER.match(body)
        if match is None:
            return False
        number = int(match.group(1))
        ask = answered_by(self.open, room_id, reply_to, conversation=conversation)
        if ask is None:
            outcome = self.closed.get(reply_to) if reply_to is not None else None
            if outcome is None:
                return False  # not about an ask: an ordinary message
            await self._tell(room_id, None, f"That question is closed already: {outcome}.", relates_to)
            return True
        if not ask.may_answer(sender):
            await self.say(ask, refusal(ask.asker or ""))
            return True
        if ask.choose(number - 1):
            return True
        await self._tell(
            room_id, ask.puppet, f"There is no option {number}: answer with a number from 1 to {len(ask.options)}."
        )
        return True

    async def on_words(
        self,
        room_id: str,
        body: str,
        reply_to: str | None,
        loose: bool = True,
        sender: str | None = None,
        conversation: str = "",
    ) -> bool:
        """An owner's message: True when it answers an open ask in words — a reply to it, or
        (with `loose`) the latest open ask of its conversation when it replies to nothing — or
        was a reply to an ask from an owner who does not answer it (refused in one line). Such
        an owner's message replying to nothing is no answer: False, an ordinary message."""
        ask = answered_by(self.open, room_id, reply_to, loose, conversation)
        if ask is None:
            return False
        if not ask.may_answer(sender):
            if reply_to is None:
                return False
            await self.say(ask, refusal(ask.asker or ""))
            return True
        ask.replies.put_nowait(body)
        return True

    # ---- Matrix -------------------------------------------------------------------------------

    async def say(self, ask: Ask, text: str) -> None:
        """One line from the puppet that asked, in the ask's room."""
        await self.notices.send(ask.puppet, ask.room_id, text)

    async def send(self, ask: Ask, content: dict) -> str | None:
        """A message from the puppet that asked, in the ask's room (None, logged, if it failed)."""
        return await self._sent(
            f"a message of the {self.what}", ask.room_id, ask.puppet.intent.send(ask.room_id, content)
        )

    async def _tell(self, room_id: str, puppet: Puppet | None, text: str, relates_to: dict | None = None) -> None:
        if puppet is None and self.channels is not None and self.identities is not None:
            portal = await self.channels.portal_for(room_id)
            if portal is not None and portal.current is not None:
                puppet = await self.identities.puppet(portal.current.agent_name)
        if puppet is not None:
            await self.notices.send(relating(puppet, room_id, relates_to), room_id, text)
        elif self.channels is not None:
            portal = await self.channels.portal_for(room_id)
            if portal is not None:
                await self.notices.in_channel(portal.room_id, portal.member_names(), text, relates_to=relates_to)

    def _close(self, ask: Ask, outcome: str) -> None:
        self.closed[ask.event_id] = outcome
        while len(self.closed) > CLOSED_KEPT:
            del self.closed[next(iter(self.closed))]

    async def show_end(self, ask: Ask, outcome: str) -> None:
        """Edit a closed ask again to show how it ended after all (coding/questions.py: a URL
        question the agent says is complete)."""
        self._close(ask, outcome)
        await self._show_end(ask, outcome)

    @staticmethod
    async def _sent(what: str, room_id: str, sending) -> str | None:
        """The event id of `sending` (an Intent call), or None, logged, if it failed."""
        try:
            return await sending
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("could not send %s to %s: %s", what, room_id, exc)
        except Exception:
            log.exception("could not send %s to %s", what, room_id)
        return None

    async def _show_end(self, ask: Ask, outcome: str) -> None:
        new = {
            "msgtype": "m.text",
            "body": f"{ask.body}\n\n{outcome}",
            "format": "org.matrix.custom.html",
            "formatted_body": f"{ask.html}<p><strong>{escape_html(outcome)}</strong></p>",
        }
        await self._sent(
            f"how the {self.what} ended", ask.room_id, ask.puppet.intent.edit(ask.room_id, ask.event_id, new)
        )
