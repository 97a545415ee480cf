"""Fixtures for the acp tests: scripted agents as real processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
from acp_helpers import scripted_spec

from acp import start_agent


@pytest.fixture
def log_path(tmp_path) -> Path:
    return tmp_path / "agent.jsonl"


@pytest_asyncio.fixture
async def spawn():
    """spawn(*args, name=..., **spec fields) -> a started Agent, stopped at teardown."""
    started = []

    async def _spawn(*args: str, name: str = "alice", on_commands=None, **kw):
        agent = await start_agent(scripted_spec(name, *args, **kw), on_commands=on_commands)
        started.append(agent)
        return agent

    yield _spawn
    for agent in started:
        await agent.stop()
