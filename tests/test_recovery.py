"""Recovery's records in the store: carried over from an older store, kept per item."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bridge.channels.recovery import ANSWERS, LEGACY, PROMPTS, Recovery
from bridge.matrix.dispatch import StoreOutage
from store import Store


def fake_bridge(**parts) -> SimpleNamespace:
    """The parts of the bridge recovery uses (its turn-end writes go through StoreOutage)."""
    bridge = SimpleNamespace(**parts)
    bridge.dispatcher = SimpleNamespace(outage=StoreOutage(bridge))
    return bridge


def recovery_on(store: Store) -> Recovery:
    return Recovery(fake_bridge(store=store, config=SimpleNamespace(agents={})))


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

    from bridge.channels.recovery import TXN

    intent = RecordingIntent()

    async def puppet(agent):
        return SimpleNamespace(intent=intent)

    store = Store.open(":memory:")
    try:
        bridge = fake_bridge(store=store, config=SimpleNamespace(agents={"alice": object()}), puppet=puppet)
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
        bridge = fake_bridge(store=store, config=SimpleNamespace(agents={"alice": object()}), puppet=puppet)
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
    from bridge.channels.recovery import INTERRUPTED, interrupted_text

    # cut after "echo: ": the mark follows what the owner saw, trailing space and all
    assert interrupted_text("✍️ writing…\n\necho: ") == f"echo: \n\n{INTERRUPTED}"
    assert interrupted_text("✍️ writing…\n\nsome text\n\n") == f"some text\n\n{INTERRUPTED}"
    assert interrupted_text("⏳ Alice is getting ready…") == INTERRUPTED
    assert interrupted_text("💭 thinking…\n\n  ") == INTERRUPTED


# ---- turns the last run never started (issue 17 §2) --------------------------------------------

@pytest.fixture
def scene():
    """A bridge stand-in whose store holds channel !r:hs with the owner's message $p; what its
    puppet sends, what it queues again."""
    store = Store.open(":memory:")
    intent, submitted = RecordingIntent(), []
    try:
        yield SimpleNamespace(store=store, intent=intent, submitted=submitted,
                              bridge=bridge_with_message(store, intent, submitted))
    finally:
        store.close()


def bridge_with_message(store: Store, intent, submitted: list):
    channel = store.create_channel("!r:hs", "general")
    store.add_message(channel.id, "@owner:hs", "user", "hello", event_ids=["$p"])

    async def puppet(agent):
        return SimpleNamespace(intent=intent)

    portal = SimpleNamespace(submit=submitted.append)
    return fake_bridge(store=store, config=SimpleNamespace(agents={"alice": object()}), puppet=puppet,
                       portal_for=lambda room_id: portal if room_id == "!r:hs" else None)


def run_for(prompt: str, agent: str = "alice"):
    from bridge.channels.stream import Answer
    answer = Answer(RecordingIntent(), "!r:hs", "Alice")
    return SimpleNamespace(prompt_event_id=prompt, agent_name=agent, answer=answer, prompt_sent=False,
                           portal=SimpleNamespace(room_id="!r:hs"))


async def test_a_turn_whose_prompt_never_reached_the_agent_is_run_again_in_its_placeholder(scene):
    store, bridge, intent, submitted = scene.store, scene.bridge, scene.intent, scene.submitted
    first = Recovery(bridge)
    first.prompt_taken("$p", "!r:hs")
    run = run_for("$p")
    first.posting(run)
    run.answer.event_ids.append("$placeholder")
    first.begin(run)  # posted; then kill -9 before session/prompt was written
    assert store.pending(ANSWERS)["$placeholder"]["sent"] is False
    after = Recovery(bridge)
    assert await after.repair() == 0 and intent.sends == []  # nothing marked interrupted
    assert after.rerun == 1
    assert after.resume() == 1 and submitted[0].skip_agents == frozenset()  # alice answers it
    again = run_for("$p")
    after.adopt(again)  # the new turn takes the placeholder over: same transaction id
    assert again.answer.placeholder_txn == run.answer.placeholder_txn and again.answer.reused
    other = run_for("$p", "bob")
    after.adopt(other)
    assert not other.answer.reused  # only its own agent's, once
    assert "$placeholder" in store.pending(ANSWERS)  # kept until the new turn ends


async def test_an_answer_whose_prompt_was_written_is_interrupted_not_run_again(scene):
    store, bridge, intent, submitted = scene.store, scene.bridge, scene.intent, scene.submitted
    first = Recovery(bridge)
    first.prompt_taken("$p", "!r:hs")
    run = run_for("$p")
    first.posting(run)  # the prompt is written before the placeholder's send came back
    first.prompt_sent(run)
    from bridge.channels.recovery import TXN
    assert store.pending(ANSWERS)[TXN + run.answer.placeholder_txn]["sent"] is True
    run.answer.event_ids.append("$placeholder")
    first.begin(run)
    assert store.pending(ANSWERS)["$placeholder"]["sent"] is True  # begin() keeps the mark
    after = Recovery(bridge)
    assert await after.repair() == 1 and after.rerun == 0
    assert [kind for kind, *_ in intent.sends] == ["edit"]
    assert after.resume() == 1 and submitted[0].skip_agents == frozenset({"alice"})


async def test_an_unstarted_turn_of_a_message_no_longer_waiting_is_marked_as_before(scene):
    store, bridge, intent, submitted = scene.store, scene.bridge, scene.intent, scene.submitted
    run = run_for("$p")
    run.answer.event_ids.append("$placeholder")
    Recovery(bridge).begin(run)  # its message is not pending any more: nothing will rerun it
    after = Recovery(bridge)
    assert await after.repair() == 1 and after.rerun == 0 and store.pending(ANSWERS) == {}


def test_turn_end_writes_wait_for_the_database_in_order_and_a_closed_store_drops_them():
    from store import StoreClosed, StoreUnavailable

    class Flaky:
        state = "down"

    done: list[str] = []

    def write(name):
        def run():
            if Flaky.state == "down":
                raise StoreUnavailable("the PostgreSQL server cannot be reached")
            if Flaky.state == "closed":
                raise StoreClosed()
            done.append(name)
        return run
    outage = StoreOutage(SimpleNamespace())
    outage.hit = lambda exc, event: None  # no watcher task here: flush is called by hand
    outage.later("first", write("first"))
    outage.later("second", write("second"))
    assert done == []
    with pytest.raises(StoreUnavailable):
        outage.flush()
    Flaky.state = "up"
    outage.later("third", write("third"))  # behind the two that wait, never before them
    assert done == ["first", "second", "third"]
    Flaky.state = "closed"
    outage.later("fourth", write("fourth"))  # quitting: dropped, the next start repairs
    Flaky.state = "up"
    outage.flush()
    assert done == ["first", "second", "third"]
