"""Notices: the one line (or listing) the bridge says in a room, as the bot or a puppet.

`send` is any notice, split to fit (a listing, an agent's words: any size, at most
MAX_NOTICE_PARTS messages, stream.notice_parts); `in_channel` picks who says it in a channel: the
puppet given, else its first member, else the bot (`notice`: the same for a portal).
A notice that cannot be sent is logged, never
raised: it tells, it does not decide anything.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from ...matrix.client import MatrixError
from ...matrix.puppet import relating
from .stream import notice_parts

if TYPE_CHECKING:
    from ...matrix.identities import Identities
    from ...matrix.puppet import Puppet

log = logging.getLogger(__name__)


class Room(Protocol):
    """A channel as a notice sees it (portal.Portal)."""

    room_id: str

    def member_names(self) -> list[str]: ...


class Notices:
    def __init__(self, identities: Identities):
        self.identities = identities

    async def notice(
        self,
        portal: Room,
        text: str,
        puppet: Puppet | None = None,
        relates_to: dict | None = None,
        html: str | None = None,
    ) -> None:
        """A notice in the channel of `portal` (see `in_channel`)."""
        await self.in_channel(portal.room_id, portal.member_names(), text, puppet, relates_to, html)

    async def in_channel(
        self,
        room_id: str,
        members: list[str],
        text: str,
        puppet: Puppet | None = None,
        relates_to: dict | None = None,
        html: str | None = None,
    ) -> None:
        """A notice in a channel of `members`: by `puppet`, else the first member, else the bot;
        with `relates_to`, into that thread (channels/base/conversations.py); `html`: its
        formatted body."""
        sender = puppet
        if sender is None:
            sender = await self.identities.puppet(members[0]) if members else self.identities.bot
        await self.send(relating(sender, room_id, relates_to), room_id, text, html)

    async def send(self, sender: Puppet, room_id: str, text: str, html: str | None = None) -> None:
        """A notice; a long one in several, each fitting an event; then without its HTML."""
        parts = notice_parts(text)
        for part in parts:
            content: dict[str, Any] = {"msgtype": "m.notice", "body": part}
            if html and len(parts) == 1:
                content.update({"format": "org.matrix.custom.html", "formatted_body": html})
            try:
                await sender.intent.send(room_id, content)
            except (MatrixError, aiohttp.ClientError) as exc:
                log.warning("could not send a notice to %s: %s", room_id, exc)
                return
            except Exception:
                log.exception("could not send a notice to %s", room_id)
                return
