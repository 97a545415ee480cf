"""An agent silent for a while during a turn: the answer's status says so, and how to stop it.

SILENT_AFTER seconds after the last thing the agent sent in this turn (or after its prompt), the
answer's status line becomes "⏳ still working, nothing received for 30 s — `!stop` to cancel",
said again each SILENT_AFTER with the time so far (an agent retrying its model for minutes shows
more than "getting ready"). What the agent sends next puts the status it had back (an update
then sets its own). Not while the agent waits for a person (a permission question, a question
to the owner): it is rightly quiet then, and the clock starts again when the answer comes.

`step()` is the decision, pure; `SilenceWatch` runs it beside a turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

SILENT_AFTER = 30.0  # seconds without anything from the agent before the status says so
PREFIX = "⏳ still working, nothing received for "


def duration(seconds: float) -> str:
    """30 s, 90 s, 2 min, 15 min (whole minutes from two on)."""
    if seconds < 120:
        return f"{seconds:g} s" if seconds < 10 else f"{int(seconds)} s"
    return f"{int(seconds // 60)} min"


def silent_status(seconds: float) -> str:
    return f"{PREFIX}{duration(seconds)} — `!stop` to cancel"


def step(now: float, last_heard: float, said: int, after: float) -> str | None:
    """The status to show now, if one is due: the agent has been silent since `last_heard`, and
    the line was said `said` times since then (once per `after` seconds of silence)."""
    due = after * (said + 1)
    if now - last_heard < due:
        return None
    return silent_status(due)


class SilenceWatch:
    """Beside one turn: `start()` once its prompt is sent, `heard()` for everything the agent
    sends, `stop()` when the prompt returns. `answer` has `status` and `set_status()`
    (stream.Answer); `asking()` says whether the agent waits for a person."""

    def __init__(self, answer, asking: Callable[[], bool] = lambda: False, after: float | None = None):
        self.answer = answer
        self.asking = asking
        self.after = SILENT_AFTER if after is None else after
        self.last = time.monotonic()
        self.said = 0
        self.before: str | None = None  # the status the silence line replaced
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.last = time.monotonic()
        self._task = asyncio.create_task(self._run(), name="silence-watch")

    def heard(self) -> None:
        self.last = time.monotonic()
        if self.said:
            self.said = 0
            if (self.answer.status or "").startswith(PREFIX):
                self.answer.set_status(self.before)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self.last + self.after * (self.said + 1) - time.monotonic()))
            now = time.monotonic()
            if self.asking():
                self.heard()  # a person is deciding: the silence counts from their answer
                continue
            line = step(now, self.last, self.said, self.after)
            if line is None:
                continue  # heard from meanwhile
            if not self.said:
                self.before = self.answer.status
            self.said += 1
            self.answer.set_status(line)
