"""Who answers a message (docs/architecture.md "Who answers"). Pure: no I/O, tested on its own.

1. `/agent:command args` (or `@agent /command args`) → that agent, `/command args`, alone.
2. Else the mentioned agents, one after the other, in the order of the mentions; a mentioned
   agent that is not a member is invited first.
3. Else the last agent who spoke in the channel; with a single member, that member.
4. Else nobody.
A direct channel's agent always answers; mentions there are plain text.
"""

from __future__ import annotations

from dataclasses import dataclass

from .mentions import Parsed


@dataclass(frozen=True)
class Answerer:
    """An agent the message is for, and what it is told: each becomes a turn record."""

    agent: str
    text: str  # what the agent is told now (the user's text, or `/command args`)
    alone: bool = False  # a slash command goes without the channel context


@dataclass(frozen=True)
class Route:
    answerers: tuple[Answerer, ...]
    invite: tuple[str, ...] = ()  # mentioned agents that must become members first
    unknown_agent: str | None = None  # `/x:cmd` naming an agent that is not configured

    @property
    def nobody(self) -> bool:
        return not self.answerers


def route(
    text: str, parsed: Parsed, members: list[str], last_speaker: str | None, direct_agent: str | None = None
) -> Route:
    if direct_agent is not None:
        if parsed.slash is not None and parsed.slash.agent == direct_agent:
            return Route((Answerer(direct_agent, parsed.slash.text, alone=True),))
        return Route((Answerer(direct_agent, text),))
    if parsed.slash is not None:
        agent = parsed.slash.agent
        invite: tuple[str, ...] = () if agent in members else (agent,)
        return Route((Answerer(agent, parsed.slash.text, alone=True),), invite=invite)
    if parsed.mentions:
        invite = tuple(agent for agent in parsed.mentions if agent not in members)
        return Route(tuple(Answerer(agent, text) for agent in parsed.mentions), invite=invite)
    if last_speaker is not None and last_speaker in members:
        return Route((Answerer(last_speaker, text),))
    if len(members) == 1:
        return Route((Answerer(members[0], text),))
    return Route(())
