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


class RecordingIntent:
    user_id = "@sk_alice:hs"

    def __init__(self):
        self.sends: list[tuple] = []

    async def send(self, room_id, content, *, event_type="m.room.message", txn_id=None):
        self.sends.append(("send", txn_id, content.get("body")))
        return "$placeholder"

    async def edit(self, room_id, event_id, new_content, *, txn_id=None):
        self.sends.append(("edit", txn_id, event_id))
        return "$edit"

    async def request(self, method, path, body=None, **kwargs):
        if "/relations/" in path:
            return 200, {"chunk": []}
        return 200, {"content": {"body": "⏳ Alice is getting ready…"}}


async def test_the_repairs_at_start_keep_their_transaction_ids():
    """Both requests recovery makes are sends with a transaction id known in advance: the
    placeholder asked again with its own (the homeserver answers its event id, posting
    nothing new), the interrupted edit with one derived from the event id (a repair repeated
    after another crash posts it once)."""
    import hashlib

    from bridge.recovery import TXN

    intent = RecordingIntent()

    async def puppet(agent):
        return SimpleNamespace(intent=intent)

    store = Store.open(":memory:")
    try:
        bridge = SimpleNamespace(store=store, config=SimpleNamespace(agents={"alice": object()}), puppet=puppet)
        where = {"room": "!r:hs", "agent": "alice", "prompt": "$p", "body": "⏳ Alice is getting ready…"}
        for _ in range(2):  # the same item, as after a crash during the first repair
            store.update_pending(ANSWERS, put={TXN + "abc123": where})
            assert await Recovery(bridge).repair() == 1
        expected = "sk-interrupted-" + hashlib.sha256(b"$placeholder").hexdigest()[:32]
        assert intent.sends == [("send", "abc123", "⏳ Alice is getting ready…"), ("edit", expected, "$placeholder")] * 2
        assert store.pending(ANSWERS) == {}
    finally:
        store.close()


async def test_an_answer_begun_is_never_begun_again_even_if_the_next_run_stops_before_resuming():
    """kill -9 mid-answer; the next start marks the answer interrupted and drops its item, then
    dies too before it got to the message; the start after must still not answer it again."""
    intent = RecordingIntent()

    async def puppet(agent):
        return SimpleNamespace(intent=intent)

    store = Store.open(":memory:")
    try:
        bridge = SimpleNamespace(store=store, config=SimpleNamespace(agents={"alice": object()}), puppet=puppet)
        first = Recovery(bridge)
        first.prompt_taken("$p", "!r:hs")
        store.update_pending(ANSWERS, put={"$placeholder": {"room": "!r:hs", "agent": "alice", "prompt": "$p"}})
        assert await Recovery(bridge).repair() == 1  # the next start; it dies before resuming $p
        assert store.pending(ANSWERS) == {}
        later = Recovery(bridge)
        assert await later.repair() == 0
        # what resume() skips: agents begun (none known from answer items any more) or done
        assert store.pending(PROMPTS)["$p"]["done"] == ["alice"]
    finally:
        store.close()


def test_an_interrupted_answer_keeps_the_text_shown_as_it_was():
    from bridge.recovery import INTERRUPTED, interrupted_text

    # cut after "echo: ": the mark follows what the owner saw, trailing space and all
    assert interrupted_text("✍️ writing…\n\necho: ") == f"echo: \n\n{INTERRUPTED}"
    assert interrupted_text("✍️ writing…\n\nsome text\n\n") == f"some text\n\n{INTERRUPTED}"
    assert interrupted_text("⏳ Alice is getting ready…") == INTERRUPTED
    assert interrupted_text("💭 thinking…\n\n  ") == INTERRUPTED
