"""Permission requests in Matrix (docs/architecture.md "Streaming, permissions and cancel"): the
puppet shows the tool call and numbered options, the owner answers by reaction or by replying with
the number (asks.py: asking and waiting).

The puppet posts one message per request — the tool call as the turn saw it (its diff, its
command, its input and locations: bridge/coding/render.py) and the options numbered 1., 2., …
and labelled by kind (allow once / allow always / reject once / reject always) — and pre-adds a keycap reaction per
option (1️⃣ 2️⃣ …). The owner's reaction with one of them, or an owner's message in that room
that is only the number, decides: a reply to a question (`m.in_reply_to`, its fallback quote
stripped) answers that question; a number that is no reply answers the latest open one of its
conversation (the main timeline or its thread). Anyone but the owners is ignored (only owners'
events are passed on); with several owners, only the one whose message started the turn
decides, another's answer is refused in one line (asks.py).
After `config.permission_timeout` seconds the outcome is `cancelled`. The message is then edited
to show the decision. While it waits, the answer's status line says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..base.parts import AskedIn
from .asks import Ask, Asking, Asks

if TYPE_CHECKING:
    from acp import PermissionRequest
    from config import Config

    from ...matrix.identities import Identities
    from ..base.notices import Notices
    from ..base.registry import Channels


DECISIONS = {
    "allow_once": "✅ Allowed once",
    "allow_always": "✅ Always allowed",
    "reject_once": "❌ Rejected",
    "reject_always": "❌ Always rejected",
}
TIMED_OUT = "⏱ No answer: cancelled"
STOPPED = "⏹ Cancelled: the answer was stopped"


def waiting_status(title: str | None) -> str:
    return f"🔧 waiting for your permission: {title or 'a tool call'}"


def decision_text(option: dict[str, Any]) -> str:
    kind = option.get("kind")
    if kind in DECISIONS:
        return DECISIONS[kind]
    name = option.get("name") or option.get("optionId") or "?"
    return f"☑️ Chose: {name}"


class Permissions:
    def __init__(
        self,
        config: Config,
        channels: Channels,
        identities: Identities,
        notices: Notices,
        render: Callable[..., tuple[Any, list]],
    ):
        """`render`: a permission request as the owner reads it, and the diffs too long for it
        (coding/render.py `permission`, plugged in by the bridge)."""
        self.render = render
        self.asks = Asks(config, notices, "permission prompt", channels, identities)

    async def ask(self, where: AskedIn, request: PermissionRequest) -> str | None:
        """Ask the owner where `where` says; the chosen optionId, or None for cancelled."""
        run = where.run if where.run is not None else where.portal.current
        options = [o for o in request.options if isinstance(o, dict) and o.get("optionId")]
        if not options:
            return None
        request.options = options
        sent = request.tool_call if isinstance(request.tool_call, dict) else {}
        known = getattr(run, "tool_calls", {}).get(sent.get("toolCallId") or "", {})
        request.tool_call = {**known, **{k: v for k, v in sent.items() if v not in (None, "", [], {})}}
        title = where.puppet.displayname
        # what it is about — the diff, the command — as the turn saw the call (coding/render.py)
        work = getattr(run, "work", None)
        shown, attachments = self.render(
            title,
            request.tool_call,
            options,
            work.known(request.tool_call.get("toolCallId")) if work is not None else None,
        )
        if work is not None:
            for view in attachments:  # a diff too long for the prompt goes just before it
                await work.attach(view, f"permission-{request.tool_call.get('toolCallId')}")
        call_title = (request.tool_call or {}).get("title") if isinstance(request.tool_call, dict) else None

        async def decided(ask: Ask) -> tuple[str, str]:
            option = options[await ask.chosen]
            return option["optionId"], decision_text(option)

        # not posted: the owner cannot be asked, cancelled rather than allowed
        # answered by an attached ACP client first (bridge/attach/hub.py): the prompt says so
        def stopped() -> str:
            return getattr(request, "answered_elsewhere", None) or STOPPED

        asking = Asking(
            shown,
            waiting_status(call_title),
            decided,
            (None, TIMED_OUT),
            stopped,
            None,
            options,
            getattr(request, "on_posted", None),
        )
        return await self.asks.ask(replace(where, run=run), asking)
