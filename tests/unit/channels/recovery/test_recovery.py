"""Recovery at start (bridge/channels/recovery/recovery.py) carrying out recovery_plan.py on the turn
records an earlier run left: the requests it makes and what it writes."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest
from scene_helpers import store_with_channel

from bridge.channels.recovery.recovery import Recovery
from bridge.outage import StoreOutage
from store.offloop import OffLoop
from store.turns import DONE, DROPPED, INTERRUPTED

BEFORE, NOW = "run-before", "run-now"


class RecordingIntent:
    user_id = "@sk_alice:hs"

    def __init__(self):
        self.sends: list[tuple] = []

    async def send(self, room_id, content, *, event_type="m.room.message", txn_id=None):
        self.sends.append(("send", txn_id, content.get("body")))
        return "$placeholder"

    async def edit(self, room_id, event_id, new_content, *, txn_id=None):
        self.sends.append(("edit", txn_id, event_id, new_content.get("body")))
        return "$edit"

    async def request(self, method, path, body=None, **kwargs):
        if "/relations/" in path:
            return 200, {"chunk": []}
        return 200, {"content": {"body": "✍️ writing…\n\nhalf an ans"}}


@pytest.fixture
def scene():
    """The parts recovery is handed, stand-ins: channel !r:hs with the owner's message $p and alice's turn on it,
    taken by an earlier run; what its puppet sends, what it queues."""
    store, channel = store_with_channel("!r:hs", "general", ("alice",))
    intent, submitted = RecordingIntent(), []
    message, (turn,) = store.turns.take(channel.id, "@owner:hs", "hello", "$p", [("alice", "hello", False)], BEFORE)

    async def puppet(agent):
        return SimpleNamespace(intent=intent)

    portal = SimpleNamespace(submit=lambda turn, incoming: submitted.append((turn, incoming)))

    async def portal_for(room_id):
        return portal if room_id == "!r:hs" else None

    config = SimpleNamespace(agents={"alice": object()})

    def recovery() -> Recovery:
        return Recovery(
            OffLoop(store), config, SimpleNamespace(portal_for=portal_for), SimpleNamespace(puppet=puppet), NOW
        )

    try:
        yield SimpleNamespace(
            store=store,
            intent=intent,
            submitted=submitted,
            config=config,
            recovery=recovery,
            turn=turn,
            message=message,
            channel=channel,
        )
    finally:
        store.close()


async def test_a_turn_whose_prompt_never_reached_the_agent_is_queued_again(scene):
    store, turn = scene.store, scene.turn
    store.turns.claim(turn.id, BEFORE)
    store.turns.posted(turn.id, ["$placeholder"])  # then kill -9 before session/prompt
    done = await scene.recovery().start()
    assert done.rerun == 1 and done.interrupted == 0 and scene.intent.sends == []
    ((queued, incoming),) = scene.submitted
    assert queued.id == turn.id and incoming.event_id == "$p" and incoming.resumed
    assert incoming.sender == "@owner:hs"  # who sent it, as stored: the one who answers its asks
    # the portal claims it for this run; its placeholder is found again by the turn's txn id
    assert store.turns.claim(turn.id, NOW).attempt == 2


async def test_an_answer_whose_prompt_was_written_is_interrupted_once_and_never_run_again(scene):
    store, turn, intent = scene.store, scene.turn, scene.intent
    store.turns.claim(turn.id, BEFORE)
    store.turns.prompted(turn.id, ["$answer"])
    for _ in range(2):  # a second start (say the first died right after the edit) does nothing more
        await scene.recovery().start()
    expected = "sk-interrupted-" + hashlib.sha256(b"$answer").hexdigest()[:32]
    assert [s[:3] for s in intent.sends] == [("edit", expected, "$answer")]
    assert "half an ans" in intent.sends[0][3] and "interrupted" in intent.sends[0][3]
    assert scene.submitted == [] and store.turns.get(turn.id).state == INTERRUPTED
    assert store.member(scene.channel.id, "alice").last_seen == scene.message.id


async def test_a_prompted_answer_whose_placeholder_was_not_known_is_found_by_its_txn_id(scene):
    store, turn, intent = scene.store, scene.turn, scene.intent
    store.turns.claim(turn.id, BEFORE)
    store.turns.prompted(turn.id, [])  # the prompt went before the placeholder's send came back
    await scene.recovery().start()
    assert [s[:3] for s in intent.sends][0] == ("send", f"sk-{turn.id}", "⏳")
    assert intent.sends[1][0] == "edit" and intent.sends[1][2] == "$placeholder"


async def test_a_final_text_on_its_way_is_sent_again_with_its_txn_id_and_stored_never_interrupted(scene):
    store, turn, intent = scene.store, scene.turn, scene.intent
    store.turns.claim(turn.id, BEFORE)
    store.turns.prompted(turn.id, ["$answer"])
    final = {
        "event": "$answer",
        "content": {"msgtype": "m.text", "body": "the whole answer"},
        "txn": f"sk-{turn.id}.1.7",
        "text": "the whole answer",
        "answer": ["$answer"],
    }
    store.turns.finishing(turn.id, final, ["$answer"])
    done = await scene.recovery().start()
    assert done.refinished == 1 and done.interrupted == 0
    assert intent.sends == [("edit", f"sk-{turn.id}.1.7", "$answer", "the whole answer")]
    assert store.message_by_event("$answer").text == "the whole answer"
    assert store.turns.get(turn.id).state == DONE


async def test_this_runs_own_turns_are_left_alone(scene):
    store = scene.store
    _, (mine,) = store.turns.take(scene.channel.id, "@owner:hs", "new", "$new", [("alice", "new", False)], NOW)
    store.turns.end(scene.turn.id, DROPPED)
    done = await scene.recovery().start()
    assert done.rerun == 0 and scene.submitted == [] and store.turns.get(mine.id).state == "taken"


async def test_a_turn_of_an_agent_no_longer_configured_is_dropped(scene):
    scene.config.agents = {}
    done = await scene.recovery().start()
    assert done.dropped == 1 and scene.store.turns.get(scene.turn.id).state == DROPPED


def test_an_interrupted_answer_keeps_the_text_shown_as_it_was():
    from bridge.channels.recovery.recovery import INTERRUPTED_TEXT as INTERRUPTED
    from bridge.channels.recovery.recovery import interrupted_text

    # cut after "echo: ": the mark follows what the owner saw, trailing space and all
    assert interrupted_text("✍️ writing…\n\necho: ") == f"echo: \n\n{INTERRUPTED}"
    assert interrupted_text("✍️ writing…\n\nsome text\n\n") == f"some text\n\n{INTERRUPTED}"
    assert interrupted_text("⏳ Alice is getting ready…") == INTERRUPTED
    assert interrupted_text("💭 thinking…\n\n  ") == INTERRUPTED


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

    outage = StoreOutage()
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


async def test_a_prompt_being_handed_over_is_marked_saying_it_may_not_have_arrived(scene):
    from bridge.channels.recovery.recovery import UNSURE_TEXT

    store, turn, intent = scene.store, scene.turn, scene.intent
    store.turns.claim(turn.id, BEFORE)
    store.turns.prompting(turn.id, ["$answer"])
    await scene.recovery().start()
    assert [s[:3] for s in intent.sends][0][0] == "edit" and UNSURE_TEXT in intent.sends[0][3]
    assert scene.submitted == [] and store.turns.get(turn.id).state == INTERRUPTED  # never sent twice


async def test_a_turn_in_a_thread_sends_its_final_text_into_the_thread_and_stores_it_there(scene):
    """The final text was to be a new message (none was posted): sent again into the turn's
    thread, with its reply fallback; the answer stored in the thread, seen there."""
    store, intent = scene.store, scene.intent
    sent: list[dict] = []
    record = intent.send

    async def send(room_id, content, *, event_type="m.room.message", txn_id=None):
        sent.append(content)
        return await record(room_id, content, event_type=event_type, txn_id=txn_id)

    intent.send = send
    store.turns.end(scene.turn.id, DROPPED)
    message, (turn,) = store.turns.take(
        scene.channel.id,
        "@owner:hs",
        "in the thread",
        "$t",
        [("alice", "in the thread", False)],
        BEFORE,
        conversation="$p",
    )
    store.set_session(scene.channel.id, "alice", "s-thread", fresh=True, conversation="$p")
    store.turns.claim(turn.id, BEFORE)
    store.turns.prompted(turn.id, [])
    final = {
        "event": None,
        "content": {"msgtype": "m.text", "body": "the answer"},
        "txn": f"sk-{turn.id}",
        "text": "the answer",
        "answer": [],
    }
    store.turns.finishing(turn.id, final, [])
    done = await scene.recovery().start()
    assert done.refinished == 1
    assert sent[0]["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$p",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$t"},
    }
    assert store.message_by_event("$placeholder").conversation == "$p"
    assert store.member(scene.channel.id, "alice", "$p").last_seen == message.id
    assert store.member(scene.channel.id, "alice").last_seen is None
