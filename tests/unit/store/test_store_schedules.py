"""Scheduled work in the store (store/schedules.py): numbered per channel, capped per
conversation, and a run taken once — its turn and the schedule moved on in one transaction."""

import pytest

from store.schedules import (
    ACTIVE,
    CANCELLED,
    DECLINED,
    DONE,
    SKIPPED,
    WAITING,
    NotYours,
    TooManySchedules,
    parse_run_key,
    run_key,
)
from store.turns import DROPPED, TAKEN

RUN = "run-1"


def test_schedules_are_numbered_per_channel_and_listed_by_conversation(store, channel):
    other = store.create_channel("!other:hs", "other")
    first = store.schedules.add(channel.id, "", "alice", "stretch", due=1000, cron=None, most=5)
    second = store.schedules.add(channel.id, "", "alice", "lunch", due=500, cron="0 12 * * *", most=5)
    elsewhere = store.schedules.add(other.id, "", "alice", "other room", due=10, cron=None, most=5)
    assert (first.number, second.number, elsewhere.number) == (1, 2, 1)
    assert [s.prompt for s in store.schedules.listed(channel.id)] == ["stretch", "lunch"]
    assert [s.prompt for s in store.schedules.listed(channel.id, "$thread")] == []
    assert store.schedules.next_due() == 10
    assert [s.prompt for s in store.schedules.due(600)] == ["other room", "lunch"]


def test_a_conversation_has_at_most_its_limit(store, channel):
    store.schedules.add(channel.id, "", "alice", "one", due=1, cron=None, most=1)
    with pytest.raises(TooManySchedules):
        store.schedules.add(channel.id, "", "alice", "two", due=1, cron=None, most=1)
    store.schedules.add(channel.id, "$thread", "alice", "in a thread", due=1, cron=None, most=1)  # its own


def test_cancel_takes_only_an_active_schedule_of_that_channel(store, channel):
    other = store.create_channel("!other:hs", "other")
    made = store.schedules.add(channel.id, "", "alice", "stretch", due=1000, cron=None, most=5)
    assert store.schedules.cancel(other.id, made.number) is None  # another room's number 1 is not it
    assert store.schedules.cancel(channel.id, made.number) == (made, 0)
    assert store.schedules.cancel(channel.id, made.number) is None
    assert store.schedules.get(made.id).state == CANCELLED and store.schedules.listed(channel.id) == []
    assert store.schedules.due(10**15) == []


def test_a_run_is_taken_once_with_its_turn(store, channel):
    made = store.schedules.add(channel.id, "", "alice", "stretch", due=1000, cron=None, most=5)
    turn = store.schedules.fire(made.id, 1000, None, RUN)
    assert (turn.prompt_event, turn.agent, turn.text, turn.state, turn.message_id) == (
        run_key(made.id, 1000),
        "alice",
        "stretch",
        TAKEN,
        None,
    )
    assert parse_run_key(turn.prompt_event) == (made.id, 1000)
    assert store.schedules.fire(made.id, 1000, None, "run-2") is None  # taken: never again
    assert store.schedules.get(made.id).state == DONE
    assert [t.id for t in store.turns.unfinished()] == [turn.id]


def test_a_repeating_run_moves_on_to_its_next_time(store, channel):
    made = store.schedules.add(channel.id, "", "alice", "standup", due=1000, cron="0 9 * * *", most=5)
    first = store.schedules.fire(made.id, 1000, 5000, RUN)
    assert first is not None and store.schedules.get(made.id).due == 5000
    assert store.schedules.fire(made.id, 1000, 9000, RUN) is None  # the old time is gone
    store.turns.end(first.id, DROPPED)  # over: the next run is not skipped
    second = store.schedules.fire(made.id, 5000, 9000, RUN)
    assert second.prompt_event == run_key(made.id, 5000) and second.id != first.id


def test_deleting_the_channel_deletes_its_schedules(store, channel):
    store.schedules.add(channel.id, "", "alice", "stretch", due=1000, cron=None, most=5)
    store.delete_channel(channel.id)
    assert store.schedules.due(10**15) == [] and store.schedules.next_due() is None


def test_other_prompt_keys_are_not_runs():
    assert parse_run_key("$event:hs") is None and parse_run_key("schedule:") is None
    assert parse_run_key("schedule:abc:x") is None


def test_a_waiting_schedule_runs_only_once_approved(store, channel):
    made = store.schedules.add(channel.id, "", "alice", "tick", due=1000, cron="* * * * *", most=5, waiting=True)
    assert made.state == WAITING and made.approved is None
    assert store.schedules.due(10**15) == [] and store.schedules.next_due() is None  # not before approval
    assert store.schedules.fire(made.id, 1000, 2000, RUN) is None
    assert [s.id for s in store.schedules.waiting()] == [made.id]
    assert [s.state for s in store.schedules.listed(channel.id)] == [WAITING]  # listed: the owner sees it
    approved = store.schedules.decide(made.id, True, 60_000, at=50_000)
    assert (approved.state, approved.due, approved.approved) == (ACTIVE, 60_000, 50_000)
    assert store.schedules.decide(made.id, False, None, at=1) is None  # decided already
    assert store.schedules.waiting() == [] and store.schedules.next_due() == 60_000


def test_a_declined_schedule_never_runs_and_its_agent_is_told_once(store, channel):
    made = store.schedules.add(channel.id, "", "alice", "tick", due=1000, cron="* * * * *", most=5, waiting=True)
    assert store.schedules.decide(made.id, False, None, at=5).state == DECLINED
    assert store.schedules.due(10**15) == [] and store.schedules.listed(channel.id) == []
    assert store.schedules.declined_news(channel.id, "", "bob") == []  # another agent's: not its news
    assert [s.number for s in store.schedules.declined_news(channel.id, "", "alice")] == [made.number]
    assert store.schedules.declined_news(channel.id, "", "alice") == []  # told once
    assert store.schedules.get(made.id).state == CANCELLED


def test_an_agent_lists_and_cancels_only_its_own(store, channel):
    mine = store.schedules.add(channel.id, "", "alice", "mine", due=1000, cron=None, most=5)
    theirs = store.schedules.add(channel.id, "", "bob", "theirs", due=1000, cron=None, most=5)
    assert [s.prompt for s in store.schedules.listed(channel.id, "", "alice")] == ["mine"]
    with pytest.raises(NotYours, match="bob"):
        store.schedules.cancel(channel.id, theirs.number, "", "alice")
    assert store.schedules.get(theirs.id).state == ACTIVE  # untouched
    assert store.schedules.cancel(channel.id, mine.number, "", "alice")[0].prompt == "mine"


def test_a_run_is_skipped_while_the_earlier_run_has_not_ended(store, channel):
    made = store.schedules.add(channel.id, "", "alice", "tick", due=1000, cron="* * * * *", most=5)
    first = store.schedules.fire(made.id, 1000, 2000, RUN, text="framed tick")
    assert first.text == "framed tick"  # what the agent is told: the caller's frame
    assert store.schedules.fire(made.id, 2000, 3000, RUN) is SKIPPED  # the first still queued
    assert store.schedules.get(made.id).due == 3000  # moved on all the same
    store.turns.end(first.id, DROPPED)
    third = store.schedules.fire(made.id, 3000, 4000, RUN)
    assert third is not None and third is not SKIPPED and third.prompt_event == run_key(made.id, 3000)


def test_cancelling_drops_the_queued_runs_and_only_its_own(store, channel):
    made = store.schedules.add(channel.id, "", "alice", "tick", due=1000, cron="* * * * *", most=5)
    other = store.schedules.add(channel.id, "", "alice", "other", due=1000, cron=None, most=5)
    queued = store.schedules.fire(made.id, 1000, 2000, RUN)
    elsewhere = store.schedules.fire(other.id, 1000, None, RUN)
    cancelled, dropped = store.schedules.cancel(channel.id, made.number)
    assert (cancelled.id, dropped) == (made.id, 1)
    assert store.turns.get(queued.id).state == DROPPED
    assert store.turns.claim(queued.id, RUN) is None  # never starts
    assert store.turns.get(elsewhere.id).state == TAKEN
