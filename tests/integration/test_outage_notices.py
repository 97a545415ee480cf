"""Who tells a room that the database is away, and back (docs/outages.md "Who tells a room"):
a member of that room, its own agent's puppet — never the bot or another agent's puppet, who
are not in it and whom the homeserver refuses.

Bob's DM, made in an earlier run and not opened in this one: the bridge does not know who is in
it (the store is what is missing) and asks the homeserver; bob tells it. A room open in this run
is told by its members as the bridge knows them (tests/unit/store/test_bridge_database_down.py).
"""

from __future__ import annotations

import logging
from collections import Counter

from bridge_harness import agent, answers_in, start_bridge
from matrix_helpers import events_in, login, open_dm, sync_until

from bridge.outage import BACK_TEXT, DOWN_TEXT

ALICE, BOB = "@sk_alice:localhost", "@sk_bob:localhost"


def notices(owner, room_id) -> list[tuple[str, str]]:
    """(sender, body) of the outage notices in `room_id`."""
    return [
        (e["sender"], e["content"]["body"])
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and e["content"].get("body") in (DOWN_TEXT, BACK_TEXT)
    ]


def echoed(owner, room_id, puppet, text) -> bool:
    return any(a["body"] == f"echo: {text}" for a in answers_in(events_in(owner, room_id), puppet))


async def test_a_room_not_open_is_told_of_the_outage_by_its_own_agent(homeserver, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="bridge.outage")
    agents = {"alice": agent("--echo-last-line"), "bob": agent("--echo-last-line")}
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    running = await start_bridge(homeserver, tmp_path / "bridge", agents)
    try:
        bobs = await open_dm(owner, BOB)
        await owner.room_send(bobs, "m.room.message", {"msgtype": "m.text", "body": "first"})
        await sync_until(owner, lambda: echoed(owner, bobs, BOB, "first"))
        await running.idle()
        await running.stop()
        # a new run: bob's DM is not open in it until a message of it is handled
        running = await start_bridge(homeserver, tmp_path / "bridge", agents)
        assert bobs not in running.bridge.channels.portals
        db = running.store.core.db
        await running.bridge.db.run(lambda: db.execute_sql("PRAGMA query_only = 1"))  # every write refused
        try:
            await owner.room_send(bobs, "m.room.message", {"msgtype": "m.text", "body": "while down"})
            await sync_until(owner, lambda: notices(owner, bobs))
        finally:
            await running.bridge.db.run(lambda: db.execute_sql("PRAGMA query_only = 0"))
        await sync_until(owner, lambda: len(notices(owner, bobs)) == 2 and echoed(owner, bobs, BOB, "while down"))
        await running.idle()
        assert notices(owner, bobs) == [(BOB, DOWN_TEXT), (BOB, BACK_TEXT)]
        # nobody outside the room was asked to tell it (the bot, alice's puppet)
        refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("could not tell")]
        assert refused == [], refused
        answers = [a["body"] for a in answers_in(events_in(owner, bobs), BOB) if a["msgtype"] != "m.notice"]
        assert Counter(answers) == {"echo: first": 1, "echo: while down": 1}, answers
    finally:
        await owner.close()
        await running.stop()
