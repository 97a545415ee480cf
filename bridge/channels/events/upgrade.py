"""A channel's room upgraded (`m.room.tombstone`): the channel moves to the replacement room.

When the owner upgrades a room (Element: room settings → upgrade; the homeserver makes the new
room, copies its state and sends `m.room.tombstone` into the old one, then Element invites the
members), the channel — its members, their ACP sessions and settings, its history — moves to
the new room: it all hangs on the channel's id, so only the room id changes (store.move_channel).
Each member's puppet joins the new room where it can (invited already, or a join rule that lets
the old room's members in); otherwise it joins when its invite comes, which finds the moved
channel. The old room gets one line saying where the channel went where a puppet may still post
there (an upgrade mutes the old room for users below level 50; clients show the tombstone's link
anyway), and is no channel any more: a message there is not answered.

Only the owner's tombstone counts: a room's state may be set by others with the power to, and a
stranger changes nothing (docs/SECURITY.md "What a stranger cannot do").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from store.offloop import OffLoop

    from ...matrix.identities import Identities
    from ...matrix.msc4391 import CommandDescriptions
    from ..base.notices import Notices
    from ..base.registry import Channels

log = logging.getLogger(__name__)


def replacement_of(event: dict, room_id: str) -> str | None:
    """The room a tombstone event points to, or None when it is no usable tombstone."""
    content = event.get("content")
    replacement = content.get("replacement_room") if isinstance(content, dict) else None
    if event.get("state_key") != "" or not isinstance(replacement, str):
        return None
    if not replacement.startswith("!") or replacement == room_id or len(replacement) > 255:
        return None
    return replacement


def moved_line(replacement: str) -> str:
    return f"➡️ This channel moved to the upgraded room: https://matrix.to/#/{replacement}"


class RoomUpgrades:
    """The handler of `m.room.tombstone` (the dispatcher's, given it by inbound.py)."""

    def __init__(
        self,
        db: OffLoop,
        channels: Channels,
        identities: Identities,
        notices: Notices,
        descriptions: CommandDescriptions,
    ):
        self.db, self.channels, self.identities = db, channels, identities
        self.notices, self.descriptions = notices, descriptions

    async def room_upgraded(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        db, portals, identities = self.db, self.channels.portals, self.identities
        replacement = replacement_of(event, room_id)
        channel = await db.channel_by_room(room_id)
        if replacement is None or channel is None:
            return
        try:
            moved = await db.move_channel(channel.id, replacement)
        except ValueError as exc:  # the new room is a channel with a history of its own
            log.warning("%s was upgraded to %s, which is already a channel: not moved (%s)", room_id, replacement, exc)
            return
        portal = portals.pop(room_id, None)
        stale = portals.pop(replacement, None)  # a portal of the channel that made way
        if portal is None:
            portal = await self.channels.portal_for(replacement)
        else:
            portal.channel = moved
            portals[replacement] = portal
        if stale is not None and stale is not portal:
            for worker in stale.workers():  # each conversation's
                worker.cancel()
        log.info("#%s moved from %s to %s (room upgrade)", moved.name, room_id, replacement)
        members = portal.member_names()
        for agent in members:
            puppet = await identities.puppet(agent)
            if await puppet.intent.join(replacement):
                self.descriptions.member_joined(replacement, agent)
        speaker = await identities.puppet(members[0]) if members else identities.bot
        if speaker is not None:
            await self.notices.send(speaker, room_id, moved_line(replacement))
