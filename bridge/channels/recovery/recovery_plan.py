"""What a start does with the turns an earlier run left unfinished
(docs/reliability.md "Exactly once"). Pure: records in, actions out, tested as a table of cases
(tests/unit/channels/recovery/test_recovery_plan.py); recovery.py carries them out.

- not begun (taken, claimed, posted — the agent was never prompted): run it (again). Its
  placeholder, if one was posted, is found again by its transaction id and reused.
- prompted (the agent had the prompt, its answer was cut): mark the answer interrupted, once;
  never prompt again — for a coding agent a prompt twice is a command run twice.
- prompting (stopped in the instant the prompt was being handed to the agent: the record is
  written first, so whether it arrived is not known): interrupted too, saying that the message
  may not have reached the agent — never sent twice.
- finishing (the final text was being sent): send that final text again with the same
  transaction id (the homeserver posts nothing twice) and store the answer. A finished answer is
  never edited into "interrupted".
- a turn to route (carried over from an older store): route its message again, leaving out the
  agents that had begun.
- its agent is no longer configured, or its channel is gone: dropped.
Turns this run took or claimed are its own, and left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from store import TurnRecord
from store.migrations import ROUTE
from store.turns import FINISHING, NOT_BEGUN, PROMPTED, PROMPTING


@dataclass(frozen=True)
class Run:
    turn: TurnRecord


@dataclass(frozen=True)
class Route:
    turn: TurnRecord  # its text: the JSON list of the agents to leave out


@dataclass(frozen=True)
class Interrupt:
    turn: TurnRecord
    unsure: bool = False  # stopped as the prompt was being handed over: it may not have arrived


@dataclass(frozen=True)
class Refinish:
    turn: TurnRecord


@dataclass(frozen=True)
class Drop:
    turn: TurnRecord
    why: str


Action = Run | Route | Interrupt | Refinish | Drop


def plan(turns: list[TurnRecord], run: str, agents: set[str], channels: set[str]) -> list[Action]:
    """The actions for `turns` (unfinished, oldest first), in that order."""
    actions: list[Action] = []
    for turn in turns:
        if turn.run == run:
            continue  # this run's own
        if turn.channel_id not in channels:
            actions.append(Drop(turn, "the channel is gone"))
        elif turn.agent == ROUTE:
            actions.append(Route(turn))
        elif turn.agent not in agents:
            actions.append(Drop(turn, f"no agent {turn.agent} is configured any more"))
        elif turn.state in NOT_BEGUN:
            actions.append(Run(turn))
        elif turn.state == PROMPTED:
            actions.append(Interrupt(turn))
        elif turn.state == PROMPTING:
            actions.append(Interrupt(turn, unsure=True))
        elif turn.state == FINISHING and turn.final is not None:
            actions.append(Refinish(turn))
        else:  # finishing without a final send recorded: its answer was cut
            actions.append(Interrupt(turn))
    return actions
