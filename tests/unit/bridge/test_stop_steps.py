"""A step of the bridge's clean stop that hangs is left after its time (bridge.py `stop_step`)."""

from __future__ import annotations

import asyncio
import logging

from bridge import bridge


async def test_a_step_that_hangs_is_cut_said_and_the_stop_goes_on(monkeypatch, caplog):
    monkeypatch.setattr(bridge, "STOP_STEP_WAIT", 0.2)
    cancelled = asyncio.Event()

    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with caplog.at_level(logging.WARNING, logger="bridge.bridge"):
        await bridge.stop_step("the encryption", hangs())
    assert cancelled.is_set()
    assert "stopping: the encryption took more than" in caplog.text


async def test_a_step_that_ends_in_time_is_waited_for_and_nothing_is_said(caplog):
    done = []

    async def quick() -> None:
        await asyncio.sleep(0)
        done.append(True)

    with caplog.at_level(logging.WARNING, logger="bridge.bridge"):
        await bridge.stop_step("the agents", quick())
    assert done == [True] and "stopping:" not in caplog.text
