"""How a turn that does not close ends: the table of bridge/channels/turns/endings.py, row by row."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from acp import AgentCrashed, AgentStopped, AgentTimeout, RpcError
from bridge.channels.base.stream import AnswerNotFinished
from bridge.channels.turns.endings import (
    END,
    FAILED_FINISH_TIMEOUT,
    INTERRUPT,
    PAUSE,
    STOPPED,
    Ending,
    Stopped,
    StoppedWaiting,
    ending,
)
from bridge.matrix.client import MatrixError
from store import StoreError, StoreUnavailable

ASKED = Stopped("alice", stopping=False, prompt_sent=True)
NOT_ASKED = Stopped("alice", stopping=False, prompt_sent=False)
STOPPING_NOT_ASKED = Stopped("alice", stopping=True, prompt_sent=False)
STOPPING_ASKED = Stopped("alice", stopping=True, prompt_sent=True)


def test_stopped_while_waiting_for_the_agent_says_stopped():
    assert ending(StoppedWaiting(), ASKED) == Ending(END, STOPPED)


@pytest.mark.parametrize("exc", [AgentCrashed("alice", 3, "boom"), AgentStopped("alice", 3)])
def test_a_crashed_agent_ends_the_answer_and_posts_its_notice(exc):
    end = ending(exc, ASKED)
    assert end == Ending(END, "⚠️ interrupted: alice stopped unexpectedly (exit code 3)", crash_notice=True)


def test_a_timed_out_agent_ends_the_answer_with_the_timeout():
    exc = AgentTimeout("alice", 60, killed=False)
    assert ending(exc, ASKED) == Ending(END, f"⚠️ interrupted: {exc}")


@pytest.mark.parametrize("stopped", [ASKED, NOT_ASKED, STOPPING_ASKED])
def test_an_acp_error_ends_the_answer_with_it(stopped):
    exc = RpcError(-32603, "internal error")
    assert ending(exc, stopped) == Ending(END, f"⚠️ {exc}")


def test_an_acp_error_while_stopping_before_the_prompt_pauses_the_turn():
    assert ending(RpcError(-32603, "gone"), STOPPING_NOT_ASKED) == Ending(PAUSE)


@pytest.mark.parametrize("stopped", [NOT_ASKED, STOPPING_NOT_ASKED])
def test_cancelled_before_the_prompt_pauses_the_turn_and_goes_on(stopped):
    assert ending(asyncio.CancelledError(), stopped) == Ending(PAUSE, reraise=True)


@pytest.mark.parametrize("stopped", [ASKED, STOPPING_ASKED])
def test_cancelled_after_the_prompt_marks_the_answer_interrupted_and_goes_on(stopped):
    assert ending(asyncio.CancelledError(), stopped) == Ending(INTERRUPT, "the bridge stopped", reraise=True)


@pytest.mark.parametrize(
    ("exc", "why"),
    [
        (MatrixError("refused"), "the homeserver did not take a message of this answer"),
        (AnswerNotFinished("refused"), "the homeserver did not take a message of this answer"),
        (aiohttp.ClientConnectionError("reset"), "the homeserver did not take a message of this answer"),
        (StoreError("disk full"), "the database failed while this answer was written"),
        (StoreUnavailable("restarting"), "the database failed while this answer was written"),
    ],
)
def test_a_known_failure_of_the_bridge_marks_the_answer_interrupted_with_one_log_line(exc, why):
    assert ending(exc, ASKED) == Ending(INTERRUPT, why, log="warning", timeout=FAILED_FINISH_TIMEOUT)


def test_a_bug_marks_the_answer_interrupted_and_logs_its_traceback():
    end = ending(KeyError("oops"), NOT_ASKED)
    assert end == Ending(
        INTERRUPT, "an error in the bridge (see its log)", log="exception", timeout=FAILED_FINISH_TIMEOUT
    )


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(1), GeneratorExit()])
def test_what_is_no_turns_end_is_raised_again(exc):
    assert ending(exc, ASKED) is None
