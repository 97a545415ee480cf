"""Several bridges, one homeserver with workers (deploy/README.md "Beyond one machine"): three
people — the owner (puppets @sk_*), Ann (@sk-ann_*) and Ben (@sk-ben_*) — each with a config, a
registration, a bridge and a store of their own, and an agent called `alice` each. All three
write at once; each reaches only their own agents, and nothing crosses: no prompt, no answer, no
stored message, no invitation.
"""

from __future__ import annotations

import asyncio

import pytest
from bridge_harness import agent, answers_in, start_bridge
from helpers import open_dm, prompts, say
from matrix_helpers import caught_up, events_in, login, sync_until

pytestmark = pytest.mark.scale


async def test_three_bridges_on_one_homeserver_each_owner_reaches_only_their_agents(homeserver, people, tmp_path):
    views = {"owner": homeserver, **{p.name: homeserver.as_person(p) for p in people}}
    puppets = {"owner": "@sk_alice:localhost", **{p.name: p.puppet("alice") for p in people}}
    services = {"owner": "sidekicks", **{p.name: f"sidekicks-{p.name}" for p in people}}
    logs = {name: tmp_path / f"{name}-alice.log" for name in views}
    before = await homeserver.workers.transactions_per_service()
    bridges, clients = {}, {}
    try:
        for name, hs in views.items():
            bridges[name] = await start_bridge(
                hs, tmp_path / name, {"alice": agent("--echo-last-line", "--log", str(logs[name]), title=name)}
            )
        for name, hs in views.items():
            clients[name] = await login(hs, hs.owner_id, hs.owner_password)
        names = list(views)

        # all three open a DM with their own alice and write at the same time
        rooms = dict(zip(names, await asyncio.gather(*(open_dm(clients[n], puppets[n]) for n in names))))
        await asyncio.gather(*(say(clients[n], rooms[n], f"hello from {n}") for n in names))

        def answered(name):
            return lambda: (
                [a["body"] for a in answers_in(events_in(clients[name], rooms[name]), puppets[name])]
                == [f"echo: hello from {name}"]
            )

        await asyncio.gather(*(sync_until(clients[n], answered(n)) for n in names))

        # a room of Ann's with her alice, the owner's and Ben's: those two decline, and only
        # Ann's alice answers her mention of "alice"
        ann, owner_alice, ben_alice = clients["ann"], puppets["owner"], puppets["ben"]
        other = (await ann.room_create(name="ann's room", invite=[puppets["ann"], owner_alice, ben_alice])).room_id

        def membership(user_id, state):
            return any(
                e.get("type") == "m.room.member"
                and e.get("state_key") == user_id
                and e["content"].get("membership") == state
                for e in events_in(ann, other)
            )

        await sync_until(
            ann,
            lambda: (
                membership(owner_alice, "leave")
                and membership(ben_alice, "leave")
                and membership(puppets["ann"], "join")
            ),
        )
        asked = await say(ann, other, "@alice are you there?")
        await bridges["ann"].handled(asked)
        await sync_until(
            ann,
            lambda: (
                [a["body"] for a in answers_in(events_in(ann, other), puppets["ann"])]
                == ["echo: @alice are you there?"]
            ),
        )
        for name in names:
            await bridges[name].idle()
        await caught_up(ann, other)
        spoke = {e["sender"] for e in events_in(ann, other) if e.get("type") == "m.room.message"}
        assert spoke == {ann.user_id, puppets["ann"]}, spoke

        # each agent was prompted by its own owner only
        for name in names:
            expected = [f"hello from {name}"] + (["@alice are you there?"] if name == "ann" else [])
            assert prompts(logs[name]) == expected, (name, prompts(logs[name]))
        # each store holds only its owner's room and words
        for name in names:
            store = bridges[name].store
            assert store.channel_by_room(rooms[name]) is not None
            for stranger in names:
                if stranger != name:
                    assert store.channel_by_room(rooms[stranger]) is None
            assert (store.channel_by_room(other) is not None) == (name == "ann")
            channel = store.channel_by_room(rooms[name])
            assert [m.text for m in store.last_messages(channel.id, 10)] == [
                f"hello from {name}",
                f"echo: hello from {name}",
            ]
        # every bridge got its transactions from the appservice worker
        after = await homeserver.workers.transactions_per_service()
        for name in names:
            assert after.get(services[name], 0) > before.get(services[name], 0), (name, before, after)
    finally:
        for client in clients.values():
            await client.close()
        for running in reversed(list(bridges.values())):
            await running.stop()
