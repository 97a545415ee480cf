"""What a start does with the turns earlier runs left (bridge/channels/recovery/recovery_plan.py), as a
table of cases: no I/O."""

import json

import pytest

from bridge.channels.recovery.recovery_plan import Drop, Interrupt, Refinish, Route, Run, plan
from store import TurnRecord

NOW, BEFORE = "run-now", "run-before"


def turn(state, run=BEFORE, agent="alice", channel="c1", final=None, id="t1", text="hi"):
    return TurnRecord(
        id=id,
        channel_id=channel,
        conversation="",
        prompt_event="$p",
        agent=agent,
        message_id="m1",
        text=text,
        alone=False,
        state=state,
        run=run,
        attempt=1,
        answer=(),
        final=final,
    )


@pytest.mark.parametrize(
    "record, expected",
    [
        # never begun: run again
        (turn("taken"), Run),
        (turn("claimed"), Run),
        (turn("posted"), Run),
        (turn("taken", run=None), Run),
        # the agent had the prompt: marked interrupted, never prompted again
        (turn("prompted"), Interrupt),
        # stopped as the prompt was handed over: interrupted (saying it may not have arrived), never sent twice
        (turn("prompting"), Interrupt),
        # the final text was on its way: sent again (same transaction id) and stored
        (turn("finishing", final={"event": "$e", "content": {}, "txn": "x", "text": "done"}), Refinish),
        (turn("finishing"), Interrupt),  # no final send recorded
        # carried over from an older store: routed again
        (turn("taken", agent="", text=json.dumps(["bob"])), Route),
        # gone
        (turn("taken", agent="carol"), Drop),
        (turn("prompted", channel="gone"), Drop),
    ],
)
def test_each_state_of_an_earlier_run(record, expected):
    actions = plan([record], NOW, agents={"alice", "bob"}, channels={"c1"})
    assert [type(a) for a in actions] == [expected]
    assert actions[0].turn is record


@pytest.mark.parametrize("state", ["taken", "claimed", "posted", "prompted", "finishing"])
def test_this_runs_own_turns_are_left_alone(state):
    # a message that arrived while the bridge started: its turns are this run's, whatever state
    assert plan([turn(state, run=NOW)], NOW, agents={"alice"}, channels={"c1"}) == []


def test_actions_keep_the_order_turns_were_taken_in():
    records = [turn("prompted", id="t1"), turn("taken", id="t2", agent="bob"), turn("posted", id="t3")]
    actions = plan(records, NOW, agents={"alice", "bob"}, channels={"c1"})
    assert [(type(a), a.turn.id) for a in actions] == [(Interrupt, "t1"), (Run, "t2"), (Run, "t3")]


def test_a_prompt_being_handed_over_is_interrupted_saying_it_may_not_have_arrived():
    (stopped,) = plan([turn("prompting")], NOW, agents={"alice"}, channels={"c1"})
    (cut,) = plan([turn("prompted")], NOW, agents={"alice"}, channels={"c1"})
    assert stopped.unsure and not cut.unsure
