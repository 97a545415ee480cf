"""What the owner sees of a turn while its agent works
(docs/architecture.md "Streaming, permissions and cancel"): the answer's status line (thinking,
writing, using a tool; "nothing received for 30 s": silence.py), the agent's text and media parts
going into the answer (stream.py), its plan and tool calls as messages (coding/work.py, through
`WorkShown`), its notices, and the puppet typing. The turn's life — its record, its agent, its end —
is turns.py; it hands each of the agent's updates to `Showing.on_update`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from acp import Update

from ...matrix.media import outgoing_part, post
from ..rules.budget_rules import usage_note
from .silence import SilenceWatch

if TYPE_CHECKING:
    from ...matrix.puppet import Puppet
    from ..base.notices import Notices
    from ..base.parts import WorkShown
    from ..base.stream import Answer

log = logging.getLogger(__name__)

STATUS_THINKING = "💭 thinking…"
STATUS_WRITING = "✍️ writing…"
THINKING_AFTER = 0.4  # seconds without a part before the status says "thinking"
TYPING_AFTER = 0.5  # seconds of work before the puppet shows typing
TYPING_EVERY = 25  # seconds between typing notices (each asks for Intent.typing's TYPING_TIMEOUT_MS)


def tool_status(title: str | None) -> str:
    return f"🔧 using a tool: {title or 'a tool'}"


class Showing:
    """What one turn shows while its agent works on the prompt.

    `media_roots()`: the directories an agent's file parts may come from (agent_files.py);
    `courtesy(coro)`: runs a request the answer does not wait for (registry.py);
    `note_tool_call(update)`: what the turn knows of a tool call so far (turns.py)."""

    def __init__(
        self,
        answer: Answer,
        work: WorkShown,
        puppet: Puppet,
        room_id: str,
        *,
        notices: Notices,
        attachment_bytes: int,
        media_roots: Callable[[], Any],
        courtesy: Callable[[Any], Any],
        note_tool_call: Callable[[Update], dict],
    ):
        self.answer, self.work, self.puppet, self.room_id = answer, work, puppet, room_id
        self.notices, self.attachment_bytes, self.media_roots = notices, attachment_bytes, media_roots
        self.courtesy, self.note_tool_call = courtesy, note_tool_call
        self._think: asyncio.TimerHandle | None = None
        self._asking: Callable[[], bool] = lambda: False
        self._quiet: SilenceWatch | None = None
        self._typing: asyncio.Task | None = None
        self._typed = False  # typing was switched on
        # ACP `messageId`: the agent's message the answer's text is in now, and the ones before
        # it — a message sent again after another began is not added twice
        self._message: str | None = None
        self._messages: set[str] = set()

    # ---- around the prompt ----------------------------------------------------------------------

    def typing_after(self, posting: asyncio.Task) -> None:
        """Typing while the agent works: from TYPING_AFTER into the turn until the prompt returns."""
        self._typing = asyncio.create_task(self._keep_typing(posting))

    def prompting(self, asking: Callable[[], bool]) -> None:
        """The prompt goes to the agent: "thinking" when the agent is slow to start (not at once:
        an edit in flight would hold back its first part), and the silence watch, quiet while
        `asking()` (a person is asked: its wait is the status then, not "thinking")."""
        self._asking = asking
        self._think = asyncio.get_running_loop().call_later(THINKING_AFTER, self._thinking)
        self._quiet = SilenceWatch(self.answer, asking)  # "nothing received for 30 s"
        self._quiet.start()

    def prompted(self) -> None:
        """The agent is done: no "thinking", no silence line, no typing (a busy homeserver is
        no reason to type)."""
        if self._think is not None:
            self._think.cancel()
        if self._quiet is not None:
            self._quiet.stop()
        if self._typing is not None:
            self._typing.cancel()

    def on_update(self, update: Update) -> None:
        """One of the agent's updates, as the owner sees it."""
        if self._think is not None:
            self._think.cancel()
        if self._quiet is not None:
            self._quiet.heard()
        answer = self.answer
        if update.kind == "text":
            if self._again(update.raw.get("messageId")):
                return
            answer.set_status(STATUS_WRITING)
            part = outgoing_part(update.raw.get("content"))  # an image, a file (media.py)
            if part is None or isinstance(part, str):
                answer.append(update.text if part is None else part)
            else:
                answer.add_media(
                    partial(post, self.puppet.intent, self.room_id, part, self.attachment_bytes, self.media_roots()),
                    part.tag,
                )
        elif update.kind == "thought":
            answer.set_status(STATUS_THINKING)
        elif update.kind == "plan":
            self.work.update(update)
        elif update.kind == "usage" and update.usage is not None:
            u = update.usage  # context used / size and cost, after the status (budget_rules.py)
            answer.set_note("usage", usage_note(u.used, u.size, u.cost, u.currency))
        elif update.kind == "notice" and update.text:
            self.courtesy(self.notices.send(self.puppet, self.room_id, f"⚠️ {update.text}"))
        elif update.kind in ("tool_call", "tool_call_update"):
            self.work.update(update)
            known = self.note_tool_call(update)
            if update.status in ("completed", "failed"):
                answer.set_status(STATUS_THINKING)
            else:
                answer.set_status(tool_status(update.title or known.get("title")))

    def _again(self, message_id) -> bool:
        """A chunk of an agent message that ended already (a later `messageId` came since): the
        agent sent it again (docs/acp.md); its text is in the answer already."""
        if not isinstance(message_id, str) or not message_id or message_id == self._message:
            return False
        if message_id in self._messages:
            return True
        if self._message is not None:
            self._messages.add(self._message)
        self._message = message_id
        return False

    # ---- once the prompt is over ----------------------------------------------------------------

    async def work_shown(self) -> None:
        """The turn's plan and tool-call messages show their final state (errors logged)."""
        try:
            await self.work.close()
        except Exception:
            log.exception("the plan or tool calls of a turn could not be shown")

    async def typing_ended(self) -> None:
        """No more typing; if it was switched on, it is switched off once a typing request in
        flight has landed."""
        if self._typing is None:
            return
        self._typing.cancel()
        try:
            await self._typing  # a typing request in flight lands before the one that ends it
        except (asyncio.CancelledError, Exception):
            pass
        if self._typed:
            await self.puppet.intent.typing(self.room_id, False)

    # ---- inside ---------------------------------------------------------------------------------

    def _thinking(self) -> None:
        if not self.answer.text and not self._asking():
            self.answer.set_status(STATUS_THINKING)

    async def _keep_typing(self, posting: asyncio.Task) -> None:
        """Typing, for answers that take a while: a quick answer needs no typing notice, and the
        first message goes out first so that nothing competes with it at the homeserver."""
        await asyncio.sleep(TYPING_AFTER)
        await asyncio.wait({posting})
        self._typed = True
        while True:
            await self.puppet.intent.typing(self.room_id, True)
            await asyncio.sleep(TYPING_EVERY)
