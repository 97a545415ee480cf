"""Puppets: the Matrix users that stand for agents (and the bridge bot, built the same way).

A puppet is registered once with `m.login.application_service` + `inhibit_login`, then acts by
masquerading. Its display name is the agent's title. Everything it does in rooms goes through
its `intent` (bridge/matrix/intent.py), the only way an event leaves the bridge.
"""

from __future__ import annotations

import asyncio
import copy
import logging

import aiohttp

from .client import AppserviceClient
from .intent import AfterSent, InRelation, Intent, Outgoing

log = logging.getLogger(__name__)


class Puppet:
    def __init__(
        self,
        user_id: str,
        displayname: str,
        homeserver: str,
        as_token: str,
        session: aiohttp.ClientSession,
        agent: str | None = None,
        outgoing: Outgoing | None = None,
    ):
        self.user_id = user_id
        self.displayname = displayname
        self.agent = agent  # None for the bridge bot
        self.intent = Intent(AppserviceClient(homeserver, user_id, as_token, session), outgoing)
        self._ready = False
        self._lock = asyncio.Lock()

    async def ensure_registered(self) -> None:
        """Register the user and set its display name, once per bridge run."""
        if self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            await self.intent.register()
            if await self.intent.displayname() != self.displayname:
                await self.intent.set_displayname(self.displayname)
            self._ready = True


def relating(puppet: Puppet, room_id: str, relates_to: dict | None) -> Puppet:
    """`puppet`, its new messages in `room_id` carrying `relates_to` (a thread: InRelation); the
    puppet itself when there is no relation (the main timeline)."""
    if not relates_to:
        return puppet
    view = copy.copy(puppet)
    view.intent = InRelation(puppet.intent, room_id, relates_to)  # type: ignore[assignment]
    return view


def after_sent(puppet: Puppet, room_id: str, first: asyncio.Future | None) -> Puppet:
    """`puppet`, its new events in `room_id` sent once `first` is done (AfterSent); the puppet
    itself when there is nothing to wait for."""
    if first is None:
        return puppet
    view = copy.copy(puppet)
    view.intent = AfterSent(puppet.intent, room_id, first)  # type: ignore[assignment]
    return view
