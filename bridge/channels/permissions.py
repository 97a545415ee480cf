"""Permission requests in Matrix (SPEC §9): the puppet shows the tool call and numbered options,
the owner answers by reaction or by replying with the number.

The puppet posts one message per request — the tool call as the turn saw it (its diff, its
command, its input and locations: bridge/coding/render.py) and the options numbered 1., 2., …
and labelled by kind (allow once / allow always / reject once / reject always) — and pre-adds a keycap reaction per
option (1️⃣ 2️⃣ …). The owner's reaction with one of them, or an owner's message in that room
that is only the number, decides: a reply to a question (`m.in_reply_to`, its fallback quote
stripped) answers that question; a number that is no reply answers the room's latest open one.
Anyone else is ignored (only owners' events are passed on).
After `config.permission_timeout` seconds the outcome is `cancelled`. The message is then edited
to show the decision. While it waits, the answer's status line says so.
"""
from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import aiohttp

from ..matrix.client import MatrixError
from .render import escape_html

if TYPE_CHECKING:
    from acp import PermissionRequest

    from config import Config

    from .notices import Notices
    from .portal import Portal
    from .registry import Channels
    from ..matrix.identities import Identities
    from ..matrix.puppet import Puppet

log = logging.getLogger(__name__)

KEYCAPS = [f"{n}\ufe0f\u20e3" for n in range(1, 10)] + ["🔟"]
NUMBER = re.compile(r"^\s*(\d{1,3})\s*[.)]?\s*$")
CLOSED_KEPT = 200          # decided questions remembered, so a late reply to one is answered

DECISIONS = {
    "allow_once": "✅ Allowed once",
    "allow_always": "✅ Always allowed",
    "reject_once": "❌ Rejected",
    "reject_always": "❌ Always rejected",
}
TIMED_OUT = "⏱ No answer: cancelled"
STOPPED = "⏹ Cancelled: the answer was stopped"


def normalise_key(key: str) -> str:
    """A reaction key without variation selectors: clients send keycaps with or without U+FE0F."""
    return key.replace("\ufe0f", "")


_KEY_INDEX = {normalise_key(key): index for index, key in enumerate(KEYCAPS)}


def waiting_status(title: str | None) -> str:
    return f"🔧 waiting for your permission: {title or 'a tool call'}"


def decision_text(option: dict[str, Any]) -> str:
    kind = option.get("kind")
    if kind in DECISIONS:
        return DECISIONS[kind]
    name = option.get("name") or option.get("optionId") or "?"
    return f"☑️ Chose: {name}"


@dataclass
class Pending:
    room_id: str
    event_id: str                       # the prompt message
    options: list[dict[str, Any]]
    future: asyncio.Future
    body: str = ""
    html: str = ""
    puppet: Any = None                  # who asked

    def choose(self, index: int) -> bool:
        if not 0 <= index < len(self.options) or self.future.done():
            return False
        self.future.set_result(index)
        return True


def question_for(pending: list[Pending], room_id: str, reply_to: str | None) -> Pending | None:
    """The open question a number answers: the one the message replies to (if it is a reply,
    only that one), else the room's latest."""
    open_here = [p for p in pending if p.room_id == room_id and not p.future.done()]
    if reply_to is not None:
        return next((p for p in open_here if p.event_id == reply_to), None)
    return open_here[-1] if open_here else None


class Permissions:
    def __init__(self, config: "Config", channels: "Channels", identities: "Identities", notices: "Notices",
                 render: Callable[..., tuple[Any, list]]):
        """`render`: a permission request as the owner reads it, and the diffs too long for it
        (coding/render.py `permission`, plugged in by the bridge)."""
        self.config, self.channels, self.identities, self.notices = config, channels, identities, notices
        self.render = render
        self.pending: list[Pending] = []   # oldest first
        self.closed: dict[str, str] = {}   # prompt event id → outcome, of the last CLOSED_KEPT

    async def ask(self, portal: "Portal", puppet: "Puppet", request: "PermissionRequest") -> str | None:
        """Ask the owner; the chosen optionId, or None for cancelled."""
        options = [o for o in request.options if isinstance(o, dict) and o.get("optionId")]
        if not options:
            return None
        request.options = options
        sent = request.tool_call if isinstance(request.tool_call, dict) else {}
        known = getattr(portal.current, "tool_calls", {}).get(sent.get("toolCallId") or "", {})
        request.tool_call = {**known, **{k: v for k, v in sent.items() if v not in (None, "", [], {})}}
        title = puppet.displayname
        # what it is about — the diff, the command — as the turn saw the call (coding/render.py)
        work = getattr(portal.current, "work", None)
        shown, attachments = self.render(
            title, request.tool_call, options,
            work.known(request.tool_call.get("toolCallId")) if work is not None else None)
        body, html = shown.body, shown.html
        if work is not None:
            for view in attachments:  # a diff too long for the prompt goes just before it
                await work.attach(view, f"permission-{request.tool_call.get('toolCallId')}")
        content = shown.content()
        event_id = await self._sent("the permission prompt", portal.room_id,
                                    puppet.intent.send(portal.room_id, content))
        if event_id is None:
            return None  # the owner cannot be asked: cancelled rather than allowed
        pending = Pending(portal.room_id, event_id, options,
                          asyncio.get_running_loop().create_future(), body, html, puppet)
        self.pending.append(pending)
        answer = getattr(portal.current, "answer", None)
        previous = answer.status if answer is not None else None
        call_title = (request.tool_call or {}).get("title") if isinstance(request.tool_call, dict) else None
        if answer is not None:
            answer.set_status(waiting_status(call_title))
        outcome: str = TIMED_OUT
        try:
            for key in KEYCAPS[:len(options)]:
                await self._sent("a reaction", portal.room_id,
                                 puppet.intent.react(portal.room_id, event_id, key))
            try:
                index = await asyncio.wait_for(asyncio.shield(pending.future),
                                               self.config.permission_timeout)
            except asyncio.TimeoutError:
                return None
            option = options[index]
            outcome = decision_text(option)
            return option["optionId"]
        except asyncio.CancelledError:
            outcome = STOPPED  # session/cancel (!stop, a redaction, 🛑) answered for the owner
            raise
        finally:
            if pending in self.pending:
                self.pending.remove(pending)
            if not pending.future.done():
                pending.future.cancel()
            if answer is not None and answer.status == waiting_status(call_title):
                answer.set_status(previous)
            self._close(pending, outcome)
            await asyncio.shield(self._show_decision(puppet, pending, outcome))

    async def on_reaction(self, event: dict, room_id: str, sender: str, relates_to: dict) -> bool:
        """An owner's reaction; True when it answered a pending permission request."""
        if relates_to.get("rel_type") != "m.annotation":
            return False
        key = relates_to.get("key")
        index = _KEY_INDEX.get(normalise_key(key)) if isinstance(key, str) else None
        if index is None:
            return False
        for pending in self.pending:
            if pending.room_id == room_id and pending.event_id == relates_to.get("event_id"):
                return pending.choose(index)
        return False

    async def on_reply(self, room_id: str, body: str, reply_to: str | None = None) -> bool:
        """An owner's message (its reply fallback stripped); True when it was a number that
        answers a question: the one it replies to, else the room's latest open one."""
        match = NUMBER.match(body)
        if match is None:
            return False
        number = int(match.group(1))
        pending = question_for(self.pending, room_id, reply_to)
        if pending is None:
            outcome = self.closed.get(reply_to) if reply_to is not None else None
            if outcome is None:
                return False  # not about a question: an ordinary message
            await self._tell(room_id, None, f"That question is closed already: {outcome}.")
            return True
        if pending.choose(number - 1):
            return True
        await self._tell(room_id, pending.puppet, f"There is no option {number}: answer with a number "
                                                  f"from 1 to {len(pending.options)}.")
        return True

    async def _tell(self, room_id: str, puppet: "Puppet | None", text: str) -> None:
        if puppet is None:
            portal = await self.channels.portal_for(room_id)
            if portal is not None and portal.current is not None:
                puppet = await self.identities.puppet(portal.current.agent_name)
        if puppet is not None:
            await self.notices.send(puppet, room_id, text)
        else:
            portal = await self.channels.portal_for(room_id)
            if portal is not None:
                await self.notices.in_channel(portal.room_id, portal.member_names(), text)

    def _close(self, pending: Pending, outcome: str) -> None:
        self.closed[pending.event_id] = outcome
        while len(self.closed) > CLOSED_KEPT:
            del self.closed[next(iter(self.closed))]

    # ---- Matrix -------------------------------------------------------------------------------

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

    async def _show_decision(self, puppet: "Puppet", pending: Pending, outcome: str) -> None:
        new = {"msgtype": "m.text", "body": f"{pending.body}\n\n{outcome}",
               "format": "org.matrix.custom.html",
               "formatted_body": f"{pending.html}<p><strong>{escape_html(outcome)}</strong></p>"}
        await self._sent("the permission decision", pending.room_id,
                         puppet.intent.edit(pending.room_id, pending.event_id, new))
