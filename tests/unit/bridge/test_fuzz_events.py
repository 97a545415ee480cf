"""Malformed, unknown and random Matrix events never raise inside the bridge (docs/architecture.md "Faults").

The homeserver is a small local aiohttp server that answers every call with 200 (aioresponses
0.7.9 cannot build responses for aiohttp 3.14), the agent is the real scripted agent, the store
is in memory. An event that makes the bridge log "could not be
handled" (an unexpected exception) fails the test.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bridge.bridge import Bridge
from bridge.matrix.appservice import Transaction
from bridge.matrix.puppet import Puppet
from config.loader import parse
from config.registration import Registration
from store import Store

OWNER, STRANGER = "@owner:localhost", "@stranger:localhost"
ROOMS = ["!dm:localhost", "!group:localhost", "!unknown:localhost"]
SCRIPTED = Path(__file__).resolve().parents[2] / "agents" / "scripted_agent.py"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=15,
)
users = st.sampled_from([OWNER, STRANGER, "@sk_alice:localhost", "@sk_nobody:localhost", "@sidekicks:localhost"])
bodies = st.sampled_from(
    ["hello", "@alice hi", "/alice:review x", "!help", "1", "", "@sk_alice:localhost /x"]
) | st.text(max_size=40)
contents = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"msgtype": st.sampled_from(["m.text", "m.notice", "m.image"]) | json_values, "body": bodies | json_values},
        optional={
            "format": st.just("org.matrix.custom.html") | json_values,
            "formatted_body": st.text(max_size=60) | json_values,
            "m.mentions": st.fixed_dictionaries({"user_ids": st.lists(users | json_values, max_size=3)}) | json_values,
            "m.relates_to": st.fixed_dictionaries(
                {
                    "rel_type": st.sampled_from(["m.replace", "m.annotation"]) | json_values,
                    "event_id": st.text(max_size=10) | json_values,
                    "key": st.sampled_from(["1️⃣", "🛑"]) | json_values,
                }
            ),
        },
    ),
    st.fixed_dictionaries(
        {"membership": st.sampled_from(["invite", "join", "leave", "ban"]) | json_values},
        optional={"is_direct": json_values},
    ),
    st.fixed_dictionaries({"name": st.text(max_size=20) | json_values}),
)
kinds = st.sampled_from(
    [
        "m.room.message",
        "m.room.member",
        "m.room.name",
        "m.reaction",
        "m.room.redaction",
        "m.room.encryption",
        "m.room.encrypted",
        "x.unknown",
    ]
)
event_ids = st.text(min_size=1, max_size=12).map(lambda s: "$" + s)
# well-formed envelopes with odd contents: these reach routing, turns and answers
plausible = st.fixed_dictionaries(
    {"type": kinds, "room_id": st.sampled_from(ROOMS), "sender": users, "event_id": event_ids, "content": contents},
    optional={"state_key": users, "redacts": event_ids},
)
# anything at all in any field
arbitrary = st.fixed_dictionaries(
    {},
    optional={
        "type": kinds | json_values,
        "room_id": st.sampled_from(ROOMS) | json_values,
        "sender": users | json_values,
        "event_id": event_ids | json_values,
        "state_key": users | json_values,
        "content": contents,
        "redacts": st.text(max_size=10) | json_values,
        "unsigned": json_values,
    },
)
events = st.one_of(plausible, arbitrary)


class Fixture:
    def __init__(self, tmp: Path):
        self.loop = asyncio.new_event_loop()
        self.calls = 0

        async def answer(request: web.Request) -> web.Response:
            self.calls += 1
            return web.json_response({"event_id": f"$sent{self.calls}", "room_id": "!new:localhost", "chunk": []})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        self.server = TestServer(app, host="127.0.0.1")
        self.loop.run_until_complete(self.server.start_server())
        HS = str(self.server.make_url("")).rstrip("/")
        cfg = parse(
            {
                "owner": OWNER,
                "homeserver": {"url": HS, "domain": "localhost"},
                "agents": {"alice": {"command": [sys.executable, str(SCRIPTED)]}},
                "limits": {"agents_in_memory": 1},
            },
            tmp / "config.yaml",
            "config.yaml",
        )
        registration = Registration("sidekicks", "http://127.0.0.1:1", "as", "hs", "sidekicks", "@sk_.*:localhost")
        store = Store.open(":memory:")
        dm = store.create_channel("!dm:localhost", "alice", direct_agent="alice")
        store.add_member(dm.id, "alice")
        group = store.create_channel("!group:localhost", "general")
        store.add_member(group.id, "alice")
        self.bridge = Bridge(cfg, registration, store)
        self.bridge.recovered.set()  # not started: no earlier run's turns to wait for

        async def setup():
            self.bridge.session = aiohttp.ClientSession()
            self.bridge.bot = Puppet(cfg.bot_user_id, "Sidekicks", HS, "as", self.bridge.session)

        self.loop.run_until_complete(setup())

    def handle(self, batch: list[dict]) -> None:
        async def run():
            await self.bridge.dispatcher.transaction(Transaction("fuzz", batch))
            workers = [w for p in self.bridge.portals.values() for w in p.workers()]
            await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), 30)

        self.loop.run_until_complete(run())

    def close(self) -> None:
        async def teardown():
            await self.bridge.pool.close()
            await self.bridge.session.close()
            await self.server.close()

        self.loop.run_until_complete(teardown())
        self.bridge.store.close()
        self.loop.close()


def test_random_events_never_raise(tmp_path, caplog):
    fixture = Fixture(tmp_path)
    caplog.set_level(logging.ERROR)
    handled = []
    try:
        # well-formed owner messages too, so the answering path is surely among the examples
        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.lists(events, min_size=1, max_size=5))
        @example(
            [
                {
                    "type": "m.room.message",
                    "room_id": "!dm:localhost",
                    "sender": OWNER,
                    "event_id": "$plain",
                    "content": {"msgtype": "m.text", "body": "hello"},
                },
                {
                    "type": "m.room.message",
                    "room_id": "!group:localhost",
                    "sender": OWNER,
                    "event_id": "$mention",
                    "content": {
                        "msgtype": "m.text",
                        "body": "@alice hi",
                        "m.mentions": {"user_ids": ["@sk_alice:localhost"]},
                    },
                },
            ]
        )
        def check(batch):
            caplog.clear()
            fixture.handle(batch)
            handled.append(len(batch))
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert not errors, (batch, [r.getMessage() for r in errors], [r.exc_text for r in errors])

        check()
        # the fuzz reached the answering path too: owner messages were answered through Matrix
        answered = fixture.bridge.store.count_messages()
    finally:
        fixture.close()
    assert sum(handled) >= 300
    assert fixture.calls > 0 and answered > 0, (fixture.calls, answered)
