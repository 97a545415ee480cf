"""The shipped local-model agent driven through the project's own ACP client (acp.start_agent),
as the bridge drives it: real subprocess, real SmolLM2-135M model."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from acp import AgentSpec, RpcError, Update, start_agent

pytestmark = pytest.mark.model


def spec(sessions: Path, name: str = "local") -> AgentSpec:
    # Temperature 0: the same answer every run, so the tests are stable.
    return AgentSpec(
        name=name,
        command=[
            sys.executable,
            "-m",
            "acp.agents.local_model",
            "--sessions",
            str(sessions),
            "--max-tokens",
            "64",
            "--temperature",
            "0",
        ],
        timeout=120,
    )


class Collector:
    """on_update callback: keeps every update; `first_text` is set at the first text part."""

    def __init__(self):
        self.updates: list[Update] = []
        self.first_text = asyncio.Event()

    def __call__(self, update: Update) -> None:
        self.updates.append(update)
        if update.kind == "text" and update.text:
            self.first_text.set()

    @property
    def texts(self) -> list[str]:
        return [u.text for u in self.updates if u.kind == "text"]


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
async def agents():
    started = []

    async def start(sessions: Path, name: str = "local"):
        agent = await start_agent(spec(sessions, name))
        started.append(agent)
        return agent

    yield start
    for agent in started:
        await agent.stop()


async def test_prompt_streams_text_updates_and_ends_the_turn(agents, sessions):
    commands: list[dict] = []
    agent = await start_agent(spec(sessions), on_commands=lambda _name, c: commands.extend(c))
    try:
        assert agent.info["name"] == "sidekicks-local"
        assert agent.load_session
        session = await agent.new_session(str(sessions.parent))
        collected = Collector()
        reason = await agent.prompt(session, "Say hello", collected)
        assert reason == "end_turn"
        texts = collected.texts
        assert len(texts) >= 3, texts
        assert all(texts)
        assert "".join(texts).strip()
        assert {c["name"] for c in commands} >= {"clear", "model", "help"}
        assert agent.returncode is None  # still running, ready for the next prompt
    finally:
        await agent.stop()


async def test_a_second_process_loads_the_session_and_answers(agents, sessions):
    first = await agents(sessions, "first")
    session = await first.new_session(str(sessions.parent))
    collected = Collector()
    assert await first.prompt(session, "Say hello", collected) == "end_turn"
    first_answer = "".join(collected.texts).strip()
    assert first_answer
    await first.stop()
    assert first.returncode is not None

    second = await agents(sessions, "second")
    assert second.load_session
    with pytest.raises(RpcError):  # an id it never saw is refused: loading is real
        await second.load_session("sess_never_made")
    await second.load_session(session)  # its replayed history is not delivered as updates
    later = Collector()
    reason = await second.prompt(session, "Say goodbye", later)
    assert reason in ("end_turn", "max_tokens")
    assert "".join(later.texts).strip()
    # the replay (user_message_chunk / agent_message_chunk of the first turn) went nowhere:
    # the second prompt's updates are its own answer only (plus, maybe, the command list the
    # agent announces after session/load, which may land while the prompt runs, and the
    # context used after the answer, for `!status`)
    kinds = {u.kind for u in later.updates}
    assert kinds <= {"text", "commands", "usage"}, kinds

    # both turns are in the session saved on disk
    saved = "\n".join(p.read_text(encoding="utf-8") for p in sessions.rglob("*.json"))
    assert "Say hello" in saved and "Say goodbye" in saved


async def test_cancel_mid_answer_gives_cancelled(agents, sessions):
    agent = await agents(sessions)
    session = await agent.new_session(str(sessions.parent))
    collected = Collector()
    prompt = asyncio.create_task(
        agent.prompt(session, "Write a long story about a dragon who learns to bake bread.", collected)
    )
    await asyncio.wait_for(collected.first_text.wait(), 120)
    assert not prompt.done()
    await agent.cancel(session)
    reason = await asyncio.wait_for(prompt, 30)
    assert reason == "cancelled"
    assert len(collected.texts) < 64  # stopped well before the token limit

    # the agent is still usable after a cancel
    again = Collector()
    assert await agent.prompt(session, "Say hello", again) in ("end_turn", "max_tokens")
    assert "".join(again.texts).strip()
