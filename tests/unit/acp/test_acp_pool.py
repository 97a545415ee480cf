"""acp.slots.Pool with real scripted agents."""

from __future__ import annotations

import asyncio

import pytest
from acp_helpers import PATIENCE, scripted_spec
from acp_helpers import until as wait_for

from acp import AgentCrashed, AgentStartError, Pool


async def test_three_agents_on_two_slots():
    stopped: list[str] = []
    pool = Pool({n: scripted_spec(n) for n in ("alice", "bob", "carol")}, agents_in_memory=2, on_stopped=stopped.append)
    try:
        alice, bob = await pool.get("alice"), await pool.get("bob")
        assert [pool.state(n) for n in ("alice", "bob", "carol")] == ["ready", "ready", "stopped"]
        async with pool.turn("alice") as agent:
            assert agent is alice and pool.state("alice") == "busy"
        # bob is now the least recently used idle agent: he makes room for carol.
        carol = await pool.get("carol")
        assert stopped == ["bob"] and bob.returncode is not None and alice.returncode is None
        assert [pool.state(n) for n in ("alice", "bob", "carol")] == ["ready", "stopped", "ready"]

        # Both running agents busy: bob has to wait, and nobody busy is stopped.
        release = {"alice": asyncio.Event(), "carol": asyncio.Event()}
        inside = {"alice": asyncio.Event(), "carol": asyncio.Event()}

        async def hold(name):
            async with pool.turn(name) as agent:
                inside[name].set()
                session_id = await agent.new_session()
                await agent.prompt(session_id, "busy", lambda u: None)
                await release[name].wait()

        holders = [asyncio.create_task(hold("alice")), asyncio.create_task(hold("carol"))]
        await asyncio.gather(inside["alice"].wait(), inside["carol"].wait())
        bob_turn = asyncio.create_task(_one_turn(pool, "bob"))
        await wait_for(lambda: pool.state("bob") == "waiting", what="bob waits for a slot")
        assert not bob_turn.done()
        assert pool.state("alice") == pool.state("carol") == "busy"
        assert stopped == ["bob"] and alice.returncode is None and carol.returncode is None

        release["alice"].set()  # alice is idle now: she makes room, carol stays
        assert await asyncio.wait_for(bob_turn, PATIENCE) == "echo: hello"
        assert stopped == ["bob", "alice"] and carol.returncode is None
        release["carol"].set()
        await asyncio.gather(*holders)
        assert [pool.state(n) for n in ("alice", "bob", "carol")] == ["stopped", "ready", "ready"]
    finally:
        await pool.close()
    assert sorted(stopped) == ["alice", "bob", "bob", "carol"]
    assert [pool.state(n) for n in ("alice", "bob", "carol")] == ["stopped"] * 3


async def _one_turn(pool, name, text="hello"):
    async with pool.turn(name) as agent:
        session_id = await agent.new_session()
        chunks = []
        await agent.prompt(session_id, text, lambda u: chunks.append(u.text))
        return "".join(chunks)


async def test_turns_for_one_agent_are_fifo_and_exclusive():
    pool = Pool({"alice": scripted_spec("alice", "--chunks", "3", "--delay", "0.02")}, agents_in_memory=2)
    events: list[tuple[str, int]] = []

    async def caller(index):
        async with pool.turn("alice") as agent:
            events.append(("in", index))
            session_id = await agent.new_session()  # one session per channel
            chunks = []
            await agent.prompt(session_id, f"channel {index}", lambda u: chunks.append(u.text))
            events.append(("out", index))
            return "".join(chunks)

    try:
        tasks = []
        for index in range(4):
            tasks.append(asyncio.create_task(caller(index)))
            await asyncio.sleep(0)  # each caller queues before the next one
        assert pool.state("alice") in ("starting", "busy")  # the first caller got it; three wait
        answers = await asyncio.wait_for(asyncio.gather(*tasks), PATIENCE)
        assert answers == [f"echo: channel {i}" for i in range(4)]
        assert events == [(step, i) for i in range(4) for step in ("in", "out")]
    finally:
        await pool.close()


async def test_state_starting_then_ready():
    pool = Pool({"alice": scripted_spec("alice")})
    try:
        getting = asyncio.create_task(pool.get("alice"))
        await asyncio.sleep(0)
        assert pool.state("alice") == "starting"
        agent = await getting
        assert pool.state("alice") == "ready" and pool.agent("alice") is agent
        assert await pool.get("alice") is agent  # no second process
    finally:
        await pool.close()


async def test_a_dead_agent_is_started_again():
    stopped: list[str] = []
    pool = Pool({"alice": scripted_spec("alice")}, on_stopped=stopped.append)
    try:
        with pytest.raises(AgentCrashed):
            async with pool.turn("alice") as agent:
                first_pid = agent.process.pid
                await agent.prompt(await agent.new_session(), "[[crash]] bye", lambda u: None)
        await wait_for(lambda: stopped == ["alice"])
        assert pool.state("alice") == "stopped"
        assert await _one_turn(pool, "alice", "back") == "echo: back"
        assert pool.agent("alice").process.pid != first_pid
    finally:
        await pool.close()


async def test_start_failure_frees_the_slot():
    pool = Pool(
        {"broken": scripted_spec("broken", "--crash-at-start"), "alice": scripted_spec("alice")}, agents_in_memory=1
    )
    try:
        with pytest.raises(AgentStartError):
            async with pool.turn("broken"):
                pass
        assert pool.state("broken") == "stopped"
        assert await _one_turn(pool, "alice") == "echo: hello"
    finally:
        await pool.close()


async def test_unknown_agent():
    pool = Pool({})
    with pytest.raises(KeyError, match="unknown agent: zed"):
        pool.state("zed")


async def test_an_agent_added_and_removed_while_the_pool_runs():
    """The bot's `!agents add | remove` (bridge/roster.py): no new pool, no restart."""
    stopped: list[str] = []
    pool = Pool({}, on_stopped=stopped.append)
    try:
        pool.add("alice", scripted_spec("alice"))
        assert await _one_turn(pool, "alice", "new") == "echo: new"
        process = pool.agent("alice").process
        await pool.remove("alice")
        assert stopped == ["alice"] and process.returncode is not None
        with pytest.raises(KeyError, match="unknown agent: alice"):
            pool.state("alice")
    finally:
        await pool.close()


async def test_a_closed_pool_refuses_turns():
    from acp import AcpError

    pool = Pool({"alice": scripted_spec("alice")})
    await pool.close()
    with pytest.raises(AcpError, match="closed"):
        async with pool.turn("alice"):
            pass
