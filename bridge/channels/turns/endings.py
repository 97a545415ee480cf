"""How a turn that does not close ends (docs/architecture.md "Streaming, permissions and cancel"):
one table from what stopped it to what its answer shows. Pure
(tests/unit/channels/turns/test_endings.py); turns.py carries it out, and its record follows from
what the answer shows (turns.py `_close_record`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from acp import AcpError, AgentCrashed, AgentTimeout
from store import StoreError

from ...matrix.client import MatrixError
from ..base.stream import AnswerNotFinished

END = "end"  # the answer finishes with `text` as its footer
PAUSE = "pause"  # the placeholder says it waits: the next start runs the turn
INTERRUPT = "interrupt"  # the answer, unless finished already, is marked "⚠️ interrupted: `text`"

FAILED_FINISH_TIMEOUT = 20  # seconds to mark an answer interrupted after a failure of the bridge
STOPPED = "⏹ stopped"


class StoppedWaiting(Exception):
    """The turn was cancelled while it waited for the agent to finish elsewhere."""


@dataclass(frozen=True)
class Ending:
    show: str  # END, PAUSE or INTERRUPT
    text: str = ""  # END: the footer; INTERRUPT: why
    crash_notice: bool = False  # a notice with the agent's exit code and the end of its stderr
    log: str | None = None  # "warning" (a known failure, one line) or "exception" (a bug: the traceback)
    reraise: bool = False  # the turn's task is cancelled (the bridge quits): it goes on being cancelled
    timeout: float = 5  # INTERRUPT: seconds given to the mark


@dataclass(frozen=True)
class Stopped:
    """What the table reads besides the exception."""

    agent: str  # the answering agent's name
    stopping: bool  # the bridge is stopping
    prompt_sent: bool  # `session/prompt` was written to the agent


def _failure(exc: BaseException) -> str:
    """What the owner is told when a turn fails outside the agent."""
    if isinstance(exc, (MatrixError, AnswerNotFinished, aiohttp.ClientError)):
        return "the homeserver did not take a message of this answer"
    if isinstance(exc, StoreError):
        return "the database failed while this answer was written"
    return "an error in the bridge (see its log)"


def _crashed(exc: BaseException, s: Stopped) -> Ending:
    if isinstance(exc, AgentCrashed) and exc.connection:  # over ssh: ssh's reason, one line
        return Ending(END, f"⚠️ interrupted: {s.agent}: {exc.connection}", crash_notice=True)
    code = exc.exit_code if isinstance(exc, AgentCrashed) else None
    return Ending(END, f"⚠️ interrupted: {s.agent} stopped unexpectedly (exit code {code})", crash_notice=True)


def _acp_error(exc: BaseException, s: Stopped) -> Ending:
    # the bridge stops (its agents with it) before the agent had the prompt: it waits for the
    # next start, like a turn the stop cancelled
    return Ending(PAUSE) if s.stopping and not s.prompt_sent else Ending(END, f"⚠️ {exc}")


def _cancelled(exc: BaseException, s: Stopped) -> Ending:
    # the bridge is quitting. An answer begun and not finished is marked so, and not stored
    # (docs/architecture.md "The store"); one whose prompt never reached the agent waits for
    # the next start, which runs it and takes its placeholder over
    if not s.prompt_sent:
        return Ending(PAUSE, reraise=True)
    return Ending(INTERRUPT, "the bridge stopped", reraise=True)


def _bridge_failure(exc: BaseException, s: Stopped) -> Ending:
    # the homeserver, the store or a bug: the answer ends marked interrupted, unstored; if even
    # that cannot be shown, its record stays prompted and the next start marks it
    known = isinstance(exc, (MatrixError, AnswerNotFinished, StoreError, aiohttp.ClientError))
    return Ending(INTERRUPT, _failure(exc), log="warning" if known else "exception", timeout=FAILED_FINISH_TIMEOUT)


# the first row whose type the exception is decides; a BaseException in none of them (a
# KeyboardInterrupt) is no turn's end and goes on as it is
TABLE: tuple[tuple[type[BaseException], Callable[[BaseException, Stopped], Ending]], ...] = (
    (StoppedWaiting, lambda exc, s: Ending(END, STOPPED)),
    (AgentCrashed, _crashed),
    (AgentTimeout, lambda exc, s: Ending(END, f"⚠️ interrupted: {exc}")),
    (AcpError, _acp_error),
    (asyncio.CancelledError, _cancelled),
    (Exception, _bridge_failure),
)


def ending(exc: BaseException, stopped: Stopped) -> Ending | None:
    """How a turn stopped by `exc` ends; None: not a turn's end (raised again as it is)."""
    for kind, rule in TABLE:
        if isinstance(exc, kind):
            return rule(exc, stopped)
    return None
