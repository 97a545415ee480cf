"""Prepare ahead (docs/prepare.md): a running agent that announces `_sidekicks/prepare` is
handed what it would be told if the owner asked now, so it can evaluate it before it is asked.

- `should_prepare(...)` (pure) — whether a member's agent gets a preparation now.
- `prepare_text(...)` (pure) — the prompt's known start: the turn's prompt without the question,
  built by the same code (context.py), so the real prompt begins with exactly these bytes.
- `soon(portal, agents, conversation)` — debounced: one preparation per member and conversation,
  `DEBOUNCE` seconds after the last trigger (a message arrives, an agent joins, a thread opens,
  `!reset`). Only running agents: no agent is started to prepare, and no slot is taken
  (acp/slots.py); never for an agent that is answering. Losing one changes nothing but speed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

from .context import UnseenMessage, build_prompt

Portal = Any  # bridge/channels/turns/portal.py (imports this module: not imported here)

log = logging.getLogger(__name__)

METHOD = "_sidekicks/prepare"
META_KEY = "sidekicks"
DEBOUNCE = 1.0  # seconds after the last trigger

_timers: dict[tuple[str, str, str], asyncio.Task] = {}


def _forget_timer(key: tuple[str, str, str], done: asyncio.Task[None]) -> None:
    """A finished preparation timer leaves the table, unless a newer one took its place."""
    if _timers.get(key) is done:
        _timers.pop(key)


def announces(meta: Any) -> bool:
    """True if the agent's `agentCapabilities._meta` announces the prepare method."""
    ours = meta.get(META_KEY) if isinstance(meta, dict) else None
    return isinstance(ours, dict) and ours.get("prepare") == METHOD


def should_prepare(state: str, announced: bool, queued: int, context_messages: int) -> bool:
    """Prepare only an agent that is running and idle (pool state "ready": never one that is
    starting, answering or waiting for a slot), announces the method, has no turn queued in
    the conversation (its prompt comes next anyway), when context is passed on at all."""
    return state == "ready" and announced and queued == 0 and context_messages > 0


def prepare_text(
    channel: str, unseen: list[UnseenMessage], max_messages: int, max_chars: int, agents: Iterable[str] = ()
) -> str:
    """The start of the prompt a turn would send now, without its question ("" when nothing
    is unseen: the question would go alone)."""
    if not unseen or max_messages <= 0:
        return ""
    return build_prompt(channel, unseen, "", max_messages, max_chars, agents)


def soon(portal: Portal, agents: list[str], conversation: str = "") -> None:
    """Prepare `agents` in the conversation DEBOUNCE seconds after the last call for them."""
    for agent in agents:
        key = (portal.room_id, agent, conversation)
        old = _timers.get(key)
        if old is not None and not old.done():
            old.cancel()
        task = asyncio.get_running_loop().create_task(_later(portal, agent, conversation))
        _timers[key] = task
        task.add_done_callback(partial(_forget_timer, key))


def pending() -> list[asyncio.Task]:
    """The preparations still waiting or being sent (the bridge cancels them when it stops)."""
    return [task for task in _timers.values() if not task.done()]


async def _later(portal: Portal, agent_name: str, conversation: str) -> None:
    await asyncio.sleep(DEBOUNCE)
    try:
        await prepare(portal, agent_name, conversation)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # only speed is lost
        log.info("no preparation for %s in %s: %s", agent_name, portal.channel.name, exc)


async def prepare(portal: Portal, agent_name: str, conversation: str = "") -> bool:
    """Hand the member's agent its prompt's known start now; True if it was sent."""
    parts = portal.parts
    config, pool = parts.config, parts.pool
    agent = pool.agent(agent_name)
    if (
        agent is None
        or agent_name not in portal.member_names()
        or not should_prepare(
            pool.state(agent_name), announces(agent.meta), portal.pending(conversation), config.context_messages
        )
    ):
        return False
    session_id, unseen = await portal.unseen_for(agent_name, agent, conversation)
    text = prepare_text(portal.channel.name, unseen, config.context_messages, config.context_chars, config.agents)
    if not text or pool.state(agent_name) != "ready":
        return False
    await agent.extension(METHOD, {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]})
    return True
