"""Random ACP frames from an agent never break the client (docs/reliability.md "Agents failing").

The agent side is a socket the test writes to: any JSON-RPC shape, wrong types, unknown
methods, stray responses, garbage lines. The client must log nothing above a warning, hand
the prompt's updates to the bridge, and still finish the prompt when the real response comes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acp.client import Agent, AgentSpec
from acp.updates import KINDS

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)
update_kinds = st.sampled_from([*KINDS, "no_such_kind"])  # every kind the client knows, and one it does not
updates = st.fixed_dictionaries(
    {"sessionUpdate": update_kinds | json_values},
    optional={
        "content": st.fixed_dictionaries(
            {"type": st.just("text") | json_values, "text": st.text(max_size=20) | json_values}
        )
        | json_values,
        "toolCallId": json_values,
        "title": json_values,
        "status": json_values,
        "availableCommands": st.lists(
            st.fixed_dictionaries({"name": json_values, "description": json_values}), max_size=2
        )
        | json_values,
        "entries": json_values,
    },
)
frames = st.one_of(
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "method": st.just("session/update"),
            "params": st.fixed_dictionaries(
                {"sessionId": st.just("s1") | json_values, "update": updates | json_values}
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "jsonrpc": st.just("2.0"),
            "method": st.sampled_from(
                ["session/request_permission", "fs/read_text_file", "terminal/create", "x/unknown"]
            )
            | st.text(max_size=10),
            "params": json_values,
        },
        optional={"id": st.integers(1000, 2000) | st.text(max_size=5)},
    ),
    st.fixed_dictionaries(
        {"jsonrpc": st.just("2.0"), "id": st.integers(500, 999) | json_values},
        optional={"result": json_values, "error": json_values},
    ),
    json_values,
)
lines = st.lists(
    st.one_of(frames.map(lambda f: json.dumps(f).encode()), st.binary(max_size=40).filter(lambda b: b"\n" not in b)),
    max_size=12,
)


class FakeProcess:
    """Just the pipes and the few fields Agent reads; the agent is the test."""

    def __init__(self, reader, writer):
        self.stdout, self.stdin = reader, writer
        self.returncode = None
        self._exit = asyncio.Event()

    async def wait(self, *args, **kwargs):
        await self._exit.wait()
        return self.returncode

    def stderr_tail(self):
        return ""

    async def stop(self, *args, **kwargs):
        self.returncode = 0
        self._exit.set()


def test_random_frames_never_break_a_prompt(caplog):
    loop = asyncio.new_event_loop()
    caplog.set_level(logging.WARNING)
    runs = []

    async def one(batch):
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)
        agent_reader, agent_writer = await asyncio.open_connection(sock=theirs)
        process = FakeProcess(reader, writer)
        agent = Agent(AgentSpec(name="fuzz", command=["fuzz"], timeout=30), process)
        agent.peer.start()
        agent.sessions.add("s1")
        seen = []
        try:
            prompt = asyncio.create_task(agent.prompt("s1", "hi", seen.append))
            request = json.loads(await agent_reader.readline())
            assert request["method"] == "session/prompt"
            agent_writer.write(b"".join(line + b"\n" for line in batch))
            agent_writer.write(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {
                            "sessionId": "s1",
                            "update": {
                                "sessionUpdate": "agent_message_chunk",
                                "content": {"type": "text", "text": "END"},
                            },
                        },
                    }
                ).encode()
                + b"\n"
            )
            agent_writer.write(
                json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"stopReason": "end_turn"}}).encode()
                + b"\n"
            )
            await agent_writer.drain()
            assert await asyncio.wait_for(prompt, 10) == "end_turn"
            assert seen and seen[-1].text == "END"  # updates still flow, in order, to the last
        finally:
            await process.stop()
            agent_writer.close()
            writer.close()
            await agent.peer.close()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(lines)
    def check(batch):
        caplog.clear()
        loop.run_until_complete(one(batch))
        runs.append(len(batch))
        bad = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not bad, [r.getMessage() for r in bad]

    try:
        check()
    finally:
        loop.close()
    assert len(runs) >= 150 and sum(runs) > 300
