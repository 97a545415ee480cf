"""Puppets: the Matrix users that stand for agents (and the bridge bot, built the same way).

A puppet is registered once with `m.login.application_service` + `inhibit_login`, then acts by
masquerading. Its display name is the agent's title.
"""
from __future__ import annotations

import asyncio
import logging
from urllib.parse import quote

import aiohttp

from .matrix import AppserviceClient, MatrixError, localpart

log = logging.getLogger(__name__)

RECEIPT_DELAY = 0.2  # seconds a read receipt waits for a newer one in the same room


class Puppet:
    def __init__(self, user_id: str, displayname: str, homeserver: str, as_token: str,
                 session: aiohttp.ClientSession, agent: str | None = None):
        self.user_id = user_id
        self.displayname = displayname
        self.agent = agent  # None for the bridge bot
        self.client = AppserviceClient(homeserver, user_id, as_token, session)
        self._ready = False
        self._lock = asyncio.Lock()
        # room → the newest event to mark read once the receipt in flight there has landed
        self._receipts: dict[str, str | None] = {}

    async def ensure_registered(self) -> None:
        """Register the user and set its display name, once per bridge run."""
        if self._ready:
            return
        async with self._lock:
            if self._ready:
                return
            status, body = await self.client.raw(
                "POST", "/_matrix/client/v3/register",
                {"type": "m.login.application_service", "username": localpart(self.user_id),
                 "inhibit_login": True},
                masquerade=False)
            if status != 200 and body.get("errcode") != "M_USER_IN_USE":
                raise MatrixError(f"registering {self.user_id}: {status} {body.get('error', body)}")
            path = f"/_matrix/client/v3/profile/{quote(self.user_id, safe='')}/displayname"
            status, body = await self.client.raw("GET", path)
            if body.get("displayname") != self.displayname:
                status, body = await self.client.raw("PUT", path, {"displayname": self.displayname})
                if status != 200:
                    raise MatrixError(f"naming {self.user_id}: {status} {body.get('error', body)}")
            self._ready = True

    async def join(self, room_id: str) -> bool:
        await self.ensure_registered()
        status, body = await self.client.raw("POST", f"/_matrix/client/v3/join/{quote(room_id, safe='')}", {})
        if status != 200:
            log.warning("%s could not join %s: %s", self.user_id, room_id, body.get("error", status))
        return status == 200

    async def leave(self, room_id: str) -> None:
        await self.ensure_registered()
        await self.client.raw("POST", f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/leave", {})

    async def typing(self, room_id: str, on: bool) -> None:
        body = {"typing": on, "timeout": 30000} if on else {"typing": False}
        path = f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/typing/{quote(self.user_id, safe='')}"
        try:
            await self.client.raw("PUT", path, body)
        except aiohttp.ClientError:
            pass  # typing is a courtesy; never fail a turn over it

    async def read_up_to(self, room_id: str, event_id: str) -> None:
        """Mark the room read up to `event_id`, RECEIPT_DELAY from now. Meanwhile (and while a
        receipt is in flight) later calls for the room only move the mark: the newest goes out,
        so a run of quick turns costs the homeserver a receipt or two, not one per message."""
        if room_id in self._receipts:
            self._receipts[room_id] = event_id
            return
        self._receipts[room_id] = event_id
        try:
            while True:
                await asyncio.sleep(RECEIPT_DELAY)
                event_id, self._receipts[room_id] = self._receipts[room_id], None
                if event_id is None:
                    return
                await self._send_receipt(room_id, event_id)
        finally:
            del self._receipts[room_id]

    async def _send_receipt(self, room_id: str, event_id: str) -> None:
        path = (f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/receipt/m.read/"
                f"{quote(event_id, safe='')}")
        try:
            status, body = await self.client.raw("POST", path, {})
            if status != 200:
                log.info("%s: read receipt refused: %s %s", self.user_id, status, body.get("error", body))
        except aiohttp.ClientError:
            pass
