"""Recovery's records in the store: carried over from an older store, kept per item."""
from __future__ import annotations

import json
from types import SimpleNamespace

from bridge.recovery import ANSWERS, LEGACY, PROMPTS, Recovery
from store import Store


def recovery_on(store: Store) -> Recovery:
    return Recovery(SimpleNamespace(store=store, config=SimpleNamespace(agents={})))


def test_an_older_stores_json_records_are_carried_over_once():
    store = Store.open(":memory:")
    try:
        store.set_value(LEGACY[PROMPTS], json.dumps({"$p": {"room": "!r:hs", "done": ["bob"]}, "$bad": 3}))
        store.set_value(LEGACY[ANSWERS], json.dumps({"$a": {"room": "!r:hs", "agent": "alice", "prompt": "$p"}}))
        recovery = recovery_on(store)
        recovery._migrate()
        assert store.pending(PROMPTS) == {"$p": {"room": "!r:hs", "done": ["bob"]}}
        assert store.pending(ANSWERS) == {"$a": {"room": "!r:hs", "agent": "alice", "prompt": "$p"}}
        assert store.get_value(LEGACY[PROMPTS]) is None and store.get_value(LEGACY[ANSWERS]) is None
        store.update_pending(PROMPTS, drop=["$p"])
        recovery._migrate()  # nothing left to carry: what was crossed out stays out
        assert store.pending(PROMPTS) == {}
    finally:
        store.close()


def test_a_message_is_written_down_until_done_and_each_agent_done_is_kept():
    store = Store.open(":memory:")
    try:
        recovery = recovery_on(store)
        recovery.prompt_taken("$p", "!r:hs")
        recovery._answered("$p", "alice")
        recovery._answered("$p", "alice")  # twice is once
        recovery._answered("$p", "bob")
        assert store.pending(PROMPTS) == {"$p": {"room": "!r:hs", "done": ["alice", "bob"]}}
        recovery.prompt_done("$p")
        assert store.pending(PROMPTS) == {}
    finally:
        store.close()
