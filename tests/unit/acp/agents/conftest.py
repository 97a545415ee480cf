from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from stdio_client import AgentProcess  # noqa: E402


@pytest.fixture
def sessions_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def start_agent(sessions_dir: Path):
    """start_agent(*extra_args) -> AgentProcess; every agent is stopped at the end. `program`:
    another command than the shipped agent's (its options follow)."""
    agents: list[AgentProcess] = []

    def start(*extra: str, sessions: Path | None = None, program: list[str] | None = None) -> AgentProcess:
        # Temperature 0: the same answer every run, so the tests are stable.
        agent = AgentProcess("--sessions", str(sessions or sessions_dir), "--temperature", "0", *extra, program=program)
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        if agent.proc.poll() is None:
            agent.close()
        assert not agent.bad_lines, f"non-JSON lines on the agent's stdout: {agent.bad_lines[:3]}"
