"""Who tells a room that the database is away, and back (bridge/outage.py): a member of that
room, never someone outside it (docs/outages.md "Who tells a room"). Pure.

The store, which knows who is where, is what is missing. The bridge still knows the members of
the channels it has open (their portals): the room's own agents, in join order. A room it has
not opened yet is asked of the homeserver (who is joined), and told by one of its agents there,
else by the bot if the bot is joined.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

BOT = ""  # the bridge bot, among the tellers (an agent's name is never empty)


def tellers(members: list[str], joined: Collection[str] | None, puppets: Mapping[str, str], bot_id: str) -> list[str]:
    """Who may tell the room, best first: agent names, or BOT.

    `members`: the agents of the room's open channel (empty when it is not open); `joined`: the
    room's joined user ids as the homeserver says (None: not asked); `puppets`: each configured
    agent's user id; `bot_id`: the bot's."""
    found = [agent for agent in members if agent in puppets]
    if found or joined is None:
        return found
    found = [agent for agent, user_id in puppets.items() if user_id in joined]
    if bot_id in joined:
        found.append(BOT)
    return found
