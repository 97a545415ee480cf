"""Turn records (store/turns.py): a message and its turns stored together; a turn claimed once
per run and never again once its prompt reached the agent; the answer, what the agent has seen
and `done` in one transaction."""

import pytest

from store import keys
from store.turns import CLAIMED, DONE, DROPPED, ENDED, FINISHING, INTERRUPTED, PROMPTED, PROMPTING, TAKEN, claimed_in

RUN, NEXT = "run-1", "run-2"


def take(store, channel, event="$m1", turns=(("alice", "hi", False), ("bob", "hi", False)), run=RUN):
    return store.turns.take(channel.id, "@me:hs", "hi", event, list(turns), run)


def test_a_message_and_its_turns_are_stored_together(store, channel):
    message, turns = take(store, channel)
    assert store.message_by_event("$m1") == message
    assert [(t.agent, t.state, t.run, t.message_id) for t in turns] == [
        ("alice", TAKEN, RUN, message.id),
        ("bob", TAKEN, RUN, message.id),
    ]
    assert turns[0].id < turns[1].id  # in the order routing gave
    assert [t.id for t in store.turns.unfinished()] == [t.id for t in turns]


def test_the_same_message_again_takes_nothing(store, channel):
    take(store, channel)
    assert take(store, channel) is None
    assert len(store.turns.unfinished()) == 2
    assert store.count_messages(channel.id) == 1


def test_a_failed_take_stores_neither_message_nor_turns(store, channel):
    with pytest.raises(LookupError):  # no such channel: the message insert fails, nothing stays
        store.turns.take("nope", "@me:hs", "hi", "$m1", [("alice", "hi", False)], RUN)
    assert store.message_by_event("$m1") is None and store.turns.unfinished() == []
    assert not store.txn_seen(keys.handled_event("$m1"))  # nor is the event recorded as handled


def test_a_take_records_its_event_as_handled_in_the_same_write(store, channel):
    assert not store.txn_seen(keys.handled_event("$m1"))
    take(store, channel)
    assert store.txn_seen(keys.handled_event("$m1"))  # the dispatcher's record of the event
    assert take(store, channel) is None and store.txn_seen(keys.handled_event("$m1"))


def test_a_turn_is_claimed_once_per_run(store, channel):
    _, (alice, _) = take(store, channel)
    claimed = store.turns.claim(alice.id, RUN)
    assert claimed.state == CLAIMED and claimed.attempt == 1
    assert store.turns.claim(alice.id, RUN) is None  # this run has it already


def test_a_take_for_a_free_conversation_claims_its_first_turn_in_the_same_write(store, channel):
    # the worker of a conversation with nothing queued starts the first turn without a claim
    # of its own; the other turns wait for theirs, and the claim still holds once per run
    _, (alice, bob) = store.turns.take(
        channel.id, "@me:hs", "hi", "$m1", [("alice", "hi", False), ("bob", "hi", False)], RUN, claim_first=True
    )
    assert (alice.state, alice.run, alice.attempt) == (CLAIMED, RUN, 1) and claimed_in(alice, RUN)
    assert bob.state == TAKEN and not claimed_in(bob, RUN)
    assert store.turns.claim(alice.id, RUN) is None  # this run has it
    assert store.turns.claim(bob.id, RUN).state == CLAIMED
    # the run stops before it began: the next run claims it (a second attempt), as any claimed turn
    assert not claimed_in(store.turns.get(alice.id), NEXT)
    assert store.turns.claim(alice.id, NEXT).attempt == 2


def test_a_later_run_claims_a_turn_that_had_not_begun_and_never_one_that_had(store, channel):
    _, (alice, bob) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.posted(alice.id, ["$answer"])
    assert store.turns.claim(alice.id, NEXT).attempt == 2  # placeholder posted, prompt not sent
    store.turns.claim(bob.id, RUN)
    store.turns.prompted(bob.id, ["$b"])
    assert store.turns.claim(bob.id, NEXT) is None  # the agent had it: never again
    assert store.turns.get(bob.id).state == PROMPTED


def test_a_released_turn_is_claimed_again_by_the_next_run(store, channel):
    _, (alice, _) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.release(alice.id)
    assert store.turns.get(alice.id).state == TAKEN
    assert store.turns.claim(alice.id, NEXT).state == CLAIMED


def test_answered_stores_the_answer_the_seen_mark_and_done_together(store, channel):
    message, (alice, _) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.prompted(alice.id, ["$a1"])
    store.turns.finishing(alice.id, {"event": "$a1", "content": {"body": "x"}, "txn": "t", "text": "x"}, ["$a1"])
    assert store.turns.get(alice.id).final["txn"] == "t"
    stored = store.turns.answered(alice.id, channel.id, "alice", "hello", ["$a1"], message.id)
    assert store.message_by_event("$a1") == stored
    assert store.member(channel.id, "alice").last_seen == message.id
    assert store.last_agent_sender(channel.id) == "alice"
    done = store.turns.get(alice.id)
    assert done.state == DONE and done.final is None and done.answer == ("$a1",)
    # written again (a retry, recovery after a crash right after): nothing twice
    assert store.turns.answered(alice.id, channel.id, "alice", "hello", ["$a1"], message.id) is None
    assert store.count_messages(channel.id) == 2


def test_states_only_move_forward(store, channel):
    _, (alice, bob) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.prompted(alice.id, [])
    store.turns.posted(alice.id, ["$late"])  # the placeholder's callback after the prompt: no step back
    assert store.turns.get(alice.id).state == PROMPTED
    store.turns.end(alice.id, ENDED, ["$a"])
    store.turns.release(alice.id)
    store.turns.end(alice.id, INTERRUPTED)
    assert store.turns.get(alice.id).state == ENDED
    with pytest.raises(ValueError):
        store.turns.end(bob.id, DONE)


def test_a_redacted_message_drops_the_turns_not_begun(store, channel):
    _, (alice, bob) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.prompted(alice.id, [])
    assert store.turns.drop_prompt("$m1") == 1
    assert store.turns.get(alice.id).state == PROMPTED and store.turns.get(bob.id).state == DROPPED
    assert store.turns.claim(bob.id, RUN) is None


def test_the_last_live_agent_is_the_newest_turn_not_over(store, channel):
    assert store.turns.last_live_agent(channel.id) is None
    _, (alice, bob) = take(store, channel)
    assert store.turns.last_live_agent(channel.id) == "bob"
    store.turns.end(bob.id, DROPPED)
    assert store.turns.last_live_agent(channel.id) == "alice"
    assert store.turns.last_live_agent(channel.id, "$thread-root") is None  # another conversation


def test_a_deleted_channel_takes_its_turns_along(store, channel):
    take(store, channel)
    store.delete_channel(channel.id)
    assert store.turns.unfinished() == []


def test_turns_over_are_pruned_with_the_transaction_keys(store, channel):
    _, (alice, bob) = take(store, channel)
    store.turns.end(alice.id, DROPPED)
    store.txn_keep_ms = -1000  # everything is old
    store.prune_txns()
    assert store.turns.get(alice.id) is None and store.turns.get(bob.id) is not None


def test_finishing_records_the_final_send(store, channel):
    _, (alice, _) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.finishing(alice.id, {"event": None}, [])  # not prompted yet: refused
    assert store.turns.get(alice.id).state == CLAIMED
    store.turns.prompted(alice.id, [])
    store.turns.finishing(alice.id, {"event": None, "txn": "sk-1"}, [])
    assert store.turns.get(alice.id).state == FINISHING


def test_a_prompt_is_recorded_before_it_is_written_and_then_as_written(store, channel):
    _, (alice, _) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.prompting(alice.id, ["$a"])
    assert store.turns.get(alice.id).state == PROMPTING
    assert store.turns.claim(alice.id, NEXT) is None  # maybe handed over already: never again
    store.turns.release(alice.id)  # (a stop in between releases nothing)
    assert store.turns.get(alice.id).state == PROMPTING
    store.turns.prompted(alice.id, ["$a"])
    assert store.turns.get(alice.id).state == PROMPTED
    store.turns.prompting(alice.id, ["$a"])  # no step back
    assert store.turns.get(alice.id).state == PROMPTED


def test_a_dropped_turn_never_starts_and_its_message_goes_with_its_last_turn(store, channel):
    _, (alice, bob) = take(store, channel)
    assert store.turns.drop(alice.id) is True
    assert store.turns.claim(alice.id, NEXT) is None  # not after a restart either
    assert [t.id for t in store.turns.unfinished()] == [bob.id]
    assert store.message_by_event("$m1") is not None  # bob still answers it
    assert store.turns.drop(bob.id) is True
    assert store.message_by_event("$m1") is None  # no agent is told it as context
    assert [t.state for t in store.turns.in_channel(channel.id)] == [DROPPED, DROPPED]


def test_a_begun_turn_is_not_dropped(store, channel):
    _, (alice, _) = take(store, channel)
    store.turns.claim(alice.id, RUN)
    store.turns.prompting(alice.id, [])
    assert store.turns.drop(alice.id) is False
    assert store.turns.get(alice.id).state == PROMPTING and store.message_by_event("$m1") is not None


def test_a_hand_off_is_a_turn_of_its_own_made_once_per_handing_turn(store, channel):
    key = "handoff:1:o:alice:t1"
    made = store.turns.hand_off(channel.id, "", key, "bob", "review it", RUN)
    assert (made.agent, made.text, made.state, made.prompt_event, made.message_id) == (
        "bob",
        "review it",
        TAKEN,
        key,
        None,
    )
    assert store.turns.hand_off(channel.id, "", key, "carol", "again", RUN) is None  # one hand-off per turn
    assert [t.id for t in store.turns.unfinished()] == [made.id]  # a restart runs it (recovery)


def test_the_hand_offs_not_begun_of_one_conversation_are_dropped(store, channel):
    _, (owner_turn, _) = take(store, channel)
    waiting = store.turns.hand_off(channel.id, "", "handoff:1:o:alice:t1", "bob", "x", RUN)
    begun = store.turns.hand_off(channel.id, "", "handoff:1:o:bob:t2", "alice", "y", RUN)
    store.turns.claim(begun.id, RUN)
    store.turns.prompting(begun.id, [])
    elsewhere = store.turns.hand_off(channel.id, "$thread", "handoff:1:o:alice:t3", "bob", "z", RUN)
    assert store.turns.drop_handoffs(channel.id, "", "handoff:") == 1
    states = {t.id: t.state for t in store.turns.in_channel(channel.id)}
    assert states[waiting.id] == DROPPED
    assert states[begun.id] == PROMPTING and states[elsewhere.id] == TAKEN and states[owner_turn.id] == TAKEN
