"""Agents handing work to each other (docs/sessions.md "Agents that hand work to each other"):
what the `handoff` tool of the agents' MCP server does (bridge/mcp/actions.py), the line the
room shows when a handed turn begins, and a chain ended.

A hand-off is a turn record made at once (store/turns.py `hand_off`) and queued in the caller's
conversation behind the caller's running turn: the one worker of the conversation runs it when
the caller's turn ends, whatever its end, and a restart runs it once like any turn not begun
(docs/reliability.md "Exactly once"). The decisions are handoffs.py's (pure).
"""

from __future__ import annotations

import logging
from typing import Any

from store import TurnRecord, keys

from ...matrix.puppet import relating
from ..base.conversations import relation_for
from ..rules.command_parse import handoffs_on
from .handoffs import KEY_PREFIX, Call, Hop, Refusal, decide, handoff_key, limit_line, room_line
from .incoming import Incoming

log = logging.getLogger(__name__)


class HandoffRefused(Exception):
    """Nothing was handed on; the line says why, to the agent."""


async def hand_off(portal: Any, conversation: str, caller: str, target: str, request: str) -> str:
    """`caller`, answering in `conversation` of `portal`, hands the next turn there to `target`
    with `request`: the handed turn stored and queued (it runs once the caller's turn ends), or
    HandoffRefused. At `limits.handoffs` the room is told once (a transaction id of the turn)."""
    parts = portal.parts
    run = portal.runs.get(conversation)
    if run is None or run.agent_name != caller or run.record is None:
        raise HandoffRefused("you can hand off only while you answer in this conversation")
    record: TurnRecord = run.record
    enabled = handoffs_on(await parts.db.get_value(keys.handoffs(portal.channel.id)))
    decision = decide(
        Call(
            caller=caller,
            target=target,
            caller_prompt=record.prompt_event,
            caller_turn=record.id,
            members=tuple(portal.member_names()),
            enabled=enabled,
            limit=parts.config.handoffs,
            stopped=run.cancelled,
            waiting=tuple(job.record.prompt_event for job in portal.queued(conversation)),
        )
    )
    if isinstance(decision, Refusal):
        if decision.limit:
            line = limit_line(caller, target, parts.config.handoffs)
            await _say(portal, caller, conversation, line, f"sk-{record.id}-handoff-limit")
        raise HandoffRefused(decision.text)
    key = handoff_key(decision)
    made = await parts.db.turns.hand_off(portal.channel.id, conversation, key, target, request, parts.run_id)
    if made is None:
        raise HandoffRefused("you have handed this turn on already: one hand-off per turn")
    where = conversation or "the main timeline"
    log.info("%s handed %s of %s to %s (%d deep)", caller, where, portal.room_id, target, decision.depth)
    portal.submit(made, Incoming(None, key, request))
    return f"Handed to {target}: {target} answers next in this conversation, once your turn ends."


async def announce(portal: Any, turn: TurnRecord, hop: Hop) -> None:
    """The line before a handed turn's answer: who handed to whom, what (once: a transaction id
    of the turn)."""
    line = room_line(hop.from_agent, turn.agent, turn.text)
    await _say(portal, hop.from_agent, turn.conversation, line, f"sk-{turn.id}-handoff")


async def end_chain(portal: Any, conversation: str) -> int:
    """The hand-offs still pending in `conversation` never start (`!stop`, a budget's stop, an
    owner message): how many."""
    return await portal.parts.db.turns.drop_handoffs(portal.channel.id, conversation, KEY_PREFIX)


async def _say(portal: Any, agent: str, conversation: str, line: str, txn_id: str) -> None:
    """A notice by `agent`'s puppet in `conversation`, sent once (`txn_id`, derived from a turn)."""
    parts = portal.parts
    try:
        puppet = relating(await parts.identities.puppet(agent), portal.room_id, relation_for(conversation))
        await puppet.intent.send(portal.room_id, {"msgtype": "m.notice", "body": line}, txn_id=txn_id)
    except Exception as exc:  # the turn matters more than its heading
        log.warning("the hand-off line in %s could not be posted: %s", portal.room_id, exc)
