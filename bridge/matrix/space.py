"""Rooms the bridge makes itself: the "Sidekicks" space, channel rooms, direct rooms, bot DMs.

The space belongs to the bridge bot (created once, its id kept as the store value "space"), so
the bot may always add or remove an `m.space.child`; an `m.space.parent` goes into a channel room
only when the room's creator (the bot, or the puppet of a direct channel) is at hand.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp

from store import keys

from .client import MatrixError

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from .identities import Identities
    from .puppet import Puppet

log = logging.getLogger(__name__)

SPACE_NAME = "Sidekicks channels"  # not the bot's name: a client tells them apart


def _q(value: str) -> str:
    return quote(value, safe="")


def room_link(room_id: str, domain: str) -> str:
    return f"https://matrix.to/#/{room_id}?via={domain}"


async def create_room(creator: Puppet, body: dict[str, Any]) -> str:
    """POST /createRoom as `creator`; the new room id, or MatrixError with the server's words."""
    return await creator.intent.create_room(body)


async def put_state(sender: Puppet, room_id: str, kind: str, state_key: str, content: dict) -> bool:
    try:
        await sender.intent.send_state(room_id, kind, state_key, content)
    except (MatrixError, aiohttp.ClientError) as exc:
        log.warning("%s in %s: %s", kind, room_id, exc)
        return False
    return True


async def give_power(sender: Puppet, room_id: str, users: list[str], level: int = 100) -> None:
    """Raise `users` to `level` in a room `sender` created (done after creation: room versions
    differ on whether the creator may appear in the power levels at all)."""
    path = f"/_matrix/client/v3/rooms/{_q(room_id)}/state/m.room.power_levels/"
    status, levels = await sender.intent.request("GET", path)
    if status != 200:
        log.warning("power levels of %s: %s %s", room_id, status, levels.get("error", levels))
        return
    levels.setdefault("users", {}).update({user: level for user in users})
    await put_state(sender, room_id, "m.room.power_levels", "", levels)


async def membership(asker: Puppet, room_id: str, user_id: str) -> str | None:
    """`user_id`'s membership in `room_id`, as `asker` (a member) sees it."""
    path = f"/_matrix/client/v3/rooms/{_q(room_id)}/state/m.room.member/{_q(user_id)}"
    try:
        status, answer = await asker.intent.request("GET", path)
    except aiohttp.ClientError:
        return None
    return answer.get("membership") if status == 200 else None


class Space:
    def __init__(self, db: OffLoop, config: Config, identities: Identities):
        self.db, self.config, self.identities = db, config, identities

    async def ensure(self) -> str:
        """The space's room id; created (owners invited) the first time."""
        db, config, bot = self.db, self.config, self.identities.bot
        space = await db.get_value(keys.SPACE)
        if space:
            return space
        space = await create_room(
            bot,
            {
                "name": SPACE_NAME,
                "topic": "Channels with your agents",
                "preset": "private_chat",
                "creation_content": {"type": "m.space"},
                "invite": list(config.owners),
                "power_level_content_override": {"events_default": 100, "invite": 100},
            },
        )
        await give_power(bot, space, list(config.owners))
        await db.set_value(keys.SPACE, space)
        return space

    async def add(self, room_id: str, parent_setter: Puppet | None = None) -> None:
        """Put `room_id` in the space; `parent_setter` (the room's creator) also marks the parent."""
        domain = self.config.domain
        try:
            space = await self.ensure()
            await put_state(self.identities.bot, space, "m.space.child", room_id, {"via": [domain]})
            if parent_setter is not None:
                await put_state(parent_setter, room_id, "m.space.parent", space, {"via": [domain], "canonical": True})
        except (MatrixError, aiohttp.ClientError) as exc:
            log.warning("could not add %s to the space: %s", room_id, exc)

    async def remove(self, room_id: str) -> None:
        space = await self.db.get_value(keys.SPACE)
        if space:
            await put_state(self.identities.bot, space, "m.space.child", room_id, {})
