"""Agents handing work to each other (docs/sessions.md "Agents that hand work to each other"):
the chain a handed turn belongs to, and whether a `handoff` call may hand on. Pure: no I/O
(tests/unit/channels/turns/test_handoffs.py); handing.py carries a decision out.

A handed turn is a turn record like any other (docs/reliability.md "Exactly once"): its prompt
key says it is one — `handoff:<depth>:<o|s>:<from agent>:<from turn>`: how many hand-offs deep
it is in its chain, whether the chain began with an owner message (`o`) or a scheduled run
(`s`), and which agent's turn handed it. One turn hands on at most once (the key names it).
"""

from __future__ import annotations

from dataclasses import dataclass

from store.schedules import KEY_PREFIX as SCHEDULE_PREFIX

KEY_PREFIX = "handoff:"
OWNER, SCHEDULE = "o", "s"


@dataclass(frozen=True)
class Hop:
    """A handed turn's place in its chain."""

    depth: int  # 1: handed by the turn that answered the owner message (or ran the schedule)
    scheduled: bool  # the chain began with a scheduled run
    from_agent: str  # who handed it
    from_turn: str  # the turn that handed it


@dataclass(frozen=True)
class Refusal:
    """The call hands nothing on; `text` says why, to the agent. `limit`: the chain is at
    `limits.handoffs`, which the room is told once."""

    text: str
    limit: bool = False


def handoff_key(hop: Hop) -> str:
    """The prompt key of the turn `hop` makes."""
    return f"{KEY_PREFIX}{hop.depth}:{SCHEDULE if hop.scheduled else OWNER}:{hop.from_agent}:{hop.from_turn}"


def parse_handoff_key(key: str | None) -> Hop | None:
    """The Hop of a handed turn's prompt key; None for any other prompt."""
    if not key or not key.startswith(KEY_PREFIX):
        return None
    parts = key[len(KEY_PREFIX) :].split(":", 3)
    if len(parts) != 4 or not parts[0].isdigit() or parts[1] not in (OWNER, SCHEDULE) or not all(parts[2:]):
        return None
    return Hop(int(parts[0]), parts[1] == SCHEDULE, parts[2], parts[3])


def is_owner_prompt(key: str) -> bool:
    """The prompt is an owner's message (neither a hand-off nor a scheduled run)."""
    return not key.startswith((KEY_PREFIX, SCHEDULE_PREFIX))


@dataclass(frozen=True)
class Call:
    """A `handoff` call, as the turn it was made in sees it."""

    caller: str  # the agent calling
    target: str  # the agent named
    caller_prompt: str  # the prompt key of the caller's running turn
    caller_turn: str  # its id
    members: tuple[str, ...]  # the channel's members
    enabled: bool  # `!handoffs` is on in the channel
    limit: int  # limits.handoffs
    stopped: bool = False  # the caller's turn was stopped (`!stop`, a budget)
    waiting: tuple[str, ...] = ()  # the prompt keys of the turns queued in the conversation


def decide(call: Call) -> Hop | Refusal:
    """The hop a call makes, or why it makes none. The order: the channel's switch, the
    target (itself, a non-member), the turn stopped, the owner having written since, the limit."""
    if not call.enabled:
        return Refusal("hand-offs are off in this channel (the owner's `!handoffs off`): answer yourself")
    if call.target == call.caller:
        return Refusal("you cannot hand this to yourself: name another member of the channel")
    if call.target not in call.members:
        others = [m for m in call.members if m != call.caller]
        named = ", ".join(others) if others else "none"
        return Refusal(f"{call.target} is not a member of this channel (the other members: {named})")
    if call.stopped:
        return Refusal("your turn was stopped: nothing is handed on")
    if any(is_owner_prompt(key) and key != call.caller_prompt for key in call.waiting):
        return Refusal("the owner has written since: their message is answered next, and nothing is handed on")
    before = parse_handoff_key(call.caller_prompt)
    depth = (before.depth if before is not None else 0) + 1
    if depth > call.limit:
        return Refusal(
            f"at most {call.limit} hand-off{'' if call.limit == 1 else 's'} follow one message "
            "(limits.handoffs): this chain ends here, answer yourself",
            limit=True,
        )
    scheduled = before.scheduled if before is not None else call.caller_prompt.startswith(SCHEDULE_PREFIX)
    return Hop(depth, scheduled, call.caller, call.caller_turn)


def room_line(caller: str, target: str, request: str, most: int = 300) -> str:
    """What the room shows of a hand-off, said by the handing agent's puppet."""
    text = " ".join(request.split())
    return f"↪ {caller} → {target}: {text if len(text) <= most else text[: most - 1] + '…'}"


def limit_line(caller: str, target: str, limit: int) -> str:
    """The one line the room shows when a chain reaches limits.handoffs."""
    return (
        f"↪ {caller} → {target} not handed: at most {limit} hand-off{'' if limit == 1 else 's'} "
        "follow one message here (limits.handoffs); the chain ends."
    )
