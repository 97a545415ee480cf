"""Presence: the bridge bot and every puppet are online while the bridge runs, offline after
(docs/architecture.md "The Matrix side"); a puppet answering says so in its status message, never
where: presence is seen by anyone who shares any room with the puppet, so it names no room
(docs/SECURITY.md "What a stranger cannot do"). Where an agent is busy is told only to the owner: in
the bot's DM (`!agents`) and in the room that waits for it.

A user who never set a presence shows as offline, and a homeserver takes a user that stopped
syncing for offline after a while (Synapse: 30 s, `presence.sync_online_timeout`), so `online`
is set again every REFRESH seconds. A `kill -9` leaves no "offline" behind: the homeserver's
own timeout brings it. A homeserver with presence off answers every presence read with
"offline": then nothing more is sent (logged once).

Status messages follow turns with a delay, so that quick answers cost no request: an answer
that lasts BUSY_AFTER seconds shows "answering" until IDLE_AFTER after its turn
(a next turn then simply replaces it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from .identities import Identities
    from .puppet import Puppet

log = logging.getLogger(__name__)

REFRESH = 20.0  # seconds between "online" updates (below Synapse's 30 s timeout)
BUSY_AFTER = 1.0  # seconds into a turn before the status message says where it answers
IDLE_AFTER = 1.0  # seconds after a turn before that status message goes
STOP_TIMEOUT = 5.0  # seconds the "offline" updates may take when the bridge stops


BUSY_STATUS = "answering"


def busy_status(channel: str) -> str:
    """The status message of a puppet answering in `channel`: the same wherever it answers."""
    return BUSY_STATUS


class Presence:
    def __init__(self, identities: Identities):
        self.identities = identities  # the bot and the puppets (identities.py)
        self.enabled = True
        self._loop: asyncio.Task | None = None
        self._status: dict[str, str | None] = {}  # agent → the status message shown
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task] = set()

    def _identities(self) -> list[Puppet]:
        return self.identities.everyone()

    # ---- life cycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Everyone online, in the background (the bridge's start does not wait for it); then
        kept online until stop()."""
        self._loop = asyncio.create_task(self._run(), name="presence")

    async def _run(self) -> None:
        await self._all_online()
        bot = self.identities.bot
        try:
            shown = await bot.intent.presence() if bot is not None else None
        except (TimeoutError, aiohttp.ClientError):
            shown = None
        if shown == "offline":  # set online a moment ago: the homeserver has presence off
            self.enabled = False
            log.info("the homeserver has presence off: puppets show no presence")
            return
        while True:
            await asyncio.sleep(REFRESH)
            await self._all_online()

    async def stop(self) -> None:
        """Everyone offline (bounded: a homeserver that is down does not hold up the stop)."""
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
        tasks = [t for t in (self._loop, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not self.enabled:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*(self._set(p, "offline") for p in self._identities())), STOP_TIMEOUT)
        except TimeoutError:
            log.info("presence: not every puppet could be set offline (the homeserver's timeout will)")

    # ---- turns ----------------------------------------------------------------------------------

    def answering(self, agent: str, channel: str | None) -> None:
        """`agent` now answers in `channel` (None: its turn is over)."""
        if not self.enabled:
            return
        pending = self._pending.pop(agent, None)
        if pending is not None:
            pending.cancel()
        wanted = busy_status(channel) if channel is not None else None
        if wanted == self._status.get(agent):
            return
        delay = BUSY_AFTER if channel is not None else IDLE_AFTER
        loop = asyncio.get_running_loop()
        self._pending[agent] = loop.call_later(delay, self._show, agent, wanted)

    def _show(self, agent: str, status: str | None) -> None:
        self._pending.pop(agent, None)
        puppet = self.identities.puppets.get(agent)
        if puppet is None:
            return
        self._status[agent] = status
        task = asyncio.create_task(self._set(puppet, "online", status), name=f"presence-{agent}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- requests -------------------------------------------------------------------------------

    async def _all_online(self) -> None:
        await asyncio.gather(*(self._set(p, "online", self._status.get(p.agent or "")) for p in self._identities()))

    async def _set(self, puppet: Puppet, presence: str, status: str | None = None) -> None:
        try:
            await puppet.intent.set_presence(presence, status)
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.debug("presence of %s: %s", puppet.user_id, exc)
