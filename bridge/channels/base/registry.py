"""The channels the bridge has open, and the turns between them (docs/architecture.md "Who answers":
one agent answers one channel at a time).

One per bridge, owned by it: the portal of each channel room (read from the store the first
time it is asked for), the channel each agent answers in now, the turns that wait for an agent
busy elsewhere (oldest first), and the courtesy requests (read receipts) turns leave running.
Two bridges in one process (tests) share none of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from store import Channel
    from store.offloop import OffLoop

Portal = TypeVar("Portal")  # portal.Portal: this module is below it (portal → turns → here)


class Channels(Generic[Portal]):
    def __init__(self, db: OffLoop, make_portal: Callable[[Channel, list[str]], Portal]):
        self.db = db
        self.make_portal = make_portal  # a channel and its members → its portal (the bridge's)
        self.portals: dict[str, Portal] = {}  # room id → portal
        self.active_turns: dict[str, Portal] = {}  # agent → the portal it answers in now
        self.waiting: dict[str, list[Any]] = {}  # agent → the turns waiting for it (turns.RunningTurn)
        self._courtesy: set[asyncio.Task] = set()

    async def portal_for(self, room_id: str) -> Portal | None:
        """The room's portal, if the room is a channel (read from the store the first time)."""
        portal = self.portals.get(room_id)
        if portal is None:
            store = self.db.target
            found = await self.db.run(lambda: _channel_and_members(store, room_id))
            if found is None:
                return None
            portal = self.portals.get(room_id)  # made meanwhile by another event
            if portal is None:
                portal = self.portals[room_id] = self.make_portal(*found)
        return portal

    def queue(self, agent: str) -> list[Any]:
        """The turns waiting for `agent` (busy in another channel), oldest first."""
        return self.waiting.setdefault(agent, [])

    def courtesy(self, coroutine) -> None:
        """Run a courtesy request (a read receipt) without waiting for it."""
        task = asyncio.create_task(coroutine)
        self._courtesy.add(task)
        task.add_done_callback(self._courtesy.discard)

    def courtesy_tasks(self) -> list[asyncio.Task]:
        """The courtesy requests still running (the bridge cancels them when it stops)."""
        return list(self._courtesy)


def _channel_and_members(store, room_id: str):
    channel = store.channel_by_room(room_id)
    if channel is None:
        return None
    return channel, [member.agent for member in store.members(channel.id)]
