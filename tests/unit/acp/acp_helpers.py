"""Helpers shared by the acp tests (a module, since tests/acp is not a package)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from acp import AgentSpec

SCRIPTED = str(Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py")


def scripted_spec(name: str = "alice", *args: str, **kw) -> AgentSpec:
    return AgentSpec(name=name, command=[sys.executable, SCRIPTED, *args], **kw)


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


PATIENCE = 60.0  # seconds a wait for a condition allows: a loaded machine is slow, not wrong


async def until(predicate, timeout: float = PATIENCE, what: str = "") -> None:
    """Poll `predicate()` until it is true; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or predicate} still false after {timeout:g} s")
        await asyncio.sleep(0.02)


async def log_until(path: Path, predicate, timeout: float = PATIENCE) -> list[dict]:
    """The agent's log once `predicate(log)` holds: the agent writes it as it reads each
    message, which may be after our call has returned."""
    deadline = time.monotonic() + timeout
    while True:
        log = read_log(path)
        if predicate(log):
            return log
        if time.monotonic() > deadline:
            raise AssertionError(f"the agent's log never satisfied {predicate}: {log[-5:]}")
        await asyncio.sleep(0.02)
