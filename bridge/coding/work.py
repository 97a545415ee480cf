"""What a coding agent does during one turn, shown in the channel: its plan and its tool calls.

`Work.update(update)` takes every `plan`, `tool_call` and `tool_call_update` of the turn:

* the plan is one message per turn (m.notice, from the agent's puppet), posted with the first
  plan and edited as the agent replaces it — a `plan` update replaces the whole plan (ACP) —
  and left showing its last state after the answer;
* each tool call is one message, posted when the call starts and edited as its updates fold in
  (kind, title, status, locations, diffs, terminal output; `content` replaces the whole list);
  a diff too long for a message goes as a `.diff` file once the call is done;
* a to-do tool's call (OpenCode's `todowrite`: acp/toolcalls.py `ToolCall.todos`) is the plan by
  another name: its list is shown in the turn's checklist, and the call has no message of its own;
* `known(id)` is the call as folded so far, for a permission prompt about it.

Edits are coalesced by `LiveMessage`; `close()` shows every message's final state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from acp import Update
from acp.toolcalls import ToolCall

from . import render
from .live import LiveMessage

if TYPE_CHECKING:
    from ..matrix.intent import Intent

log = logging.getLogger(__name__)

MAX_CALLS = 200  # tool calls shown per turn; past this, only the count is kept (a runaway agent)


class Work:
    def __init__(self, intent: Intent, room_id: str, attach_limit: int):
        self.intent = intent
        self.room_id = room_id
        self.attach_limit = attach_limit
        self.plan: LiveMessage | None = None
        self.plan_updates = 0
        self.calls: dict[str, ToolCall] = {}
        self._messages: dict[str, LiveMessage] = {}
        self._attached: set[tuple[str, str, int]] = set()
        self.unshown = 0  # tool calls past MAX_CALLS

    # -- updates ------------------------------------------------------------------------------

    def update(self, update: Update) -> bool:
        """Take a plan or tool-call update; False for any other kind."""
        if update.kind == "plan":
            self._show_plan(update.plan or [])
            return True
        if update.kind not in ("tool_call", "tool_call_update"):
            return False
        ident = update.tool_call_id or ""
        call = self.calls.get(ident)
        if call is None:
            if len(self.calls) >= MAX_CALLS:
                self.unshown += 1
                return True
            call = self.calls[ident] = ToolCall(ident)
        call.apply(update)
        message = self._messages.get(ident)
        if call.todo and message is None:  # a to-do list: the checklist, no tool-call message
            if call.todos is not None:
                self._show_plan(call.todos, "To-do list")
            return True
        if message is None:
            message = self._messages[ident] = LiveMessage(self.intent, self.room_id, "a tool call")
        shown, _ = render.tool_call(call)
        message.show(shown.content("m.notice"))
        return True

    def _show_plan(self, entries, heading: str = "Plan") -> None:
        self.plan_updates += 1
        if self.plan is None:
            self.plan = LiveMessage(self.intent, self.room_id, "the plan")
        self.plan.show(render.plan(entries, heading).content("m.notice"))

    def known(self, tool_call_id: str | None) -> ToolCall | None:
        return self.calls.get(tool_call_id or "")

    # -- the end of the turn --------------------------------------------------------------------

    async def close(self) -> None:
        """Every message shows its last state; long diffs are posted as files."""
        if self.plan is not None:
            await self.plan.close()
        for ident, message in list(self._messages.items()):
            call = self.calls[ident]
            shown, attachments = render.tool_call(call)
            await message.close(shown.content("m.notice"))
            for view in attachments:
                await self.attach(view, ident)

    async def attach(self, view: render.DiffView, scope: str) -> str | None:
        """A long diff as a `.diff` file (once per call, path and size); its event id."""
        key = (scope, view.path, len(view.text))
        if key in self._attached:
            return None
        self._attached.add(key)
        from ..matrix.media import MediaError, OutgoingMedia, post  # media imports the answer side

        media = OutgoingMedia("m.file", view.filename, "text/x-diff", data=view.text.encode("utf-8"))
        try:
            return await post(self.intent, self.room_id, media, self.attach_limit)
        except MediaError as exc:
            log.warning("the diff of %s was not posted: %s", view.path, exc)
        except Exception as exc:
            log.warning("the diff of %s was not posted in %s: %s", view.path, self.room_id, exc)
        return None

    @property
    def message_ids(self) -> list[str]:
        ids = [self.plan.event_id] if self.plan is not None and self.plan.event_id else []
        return ids + [m.event_id for m in self._messages.values() if m.event_id]
