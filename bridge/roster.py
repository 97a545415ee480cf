"""Agents added and removed while the bridge runs: the bot's `!agents add ID` and `!agents remove
NAME` (docs/commands.md "In the bridge bot's DM"). No restart: the config file is rewritten
(config/config_edit.py), read again, and the running parts learn the one agent that changed —
its settings (`config.agents`), how it starts (`specs`, with the MCP socket), the pool's entry,
the names it is called by, its puppet (and, with encryption, the puppet's device). A removed
agent says a line in each of its channels, leaves them, and its process stops.

bridge.py builds it and hands it to the bot's commands; what the registry gives is
bridge/agents_registry.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import config as configuration
from acp import AgentSpec, Pool
from config import ConfigError, config_edit
from config.agent_registry import RegistryError

from . import agent_specs, agents_registry
from .matrix import avatars
from .matrix.identities import Identities

if TYPE_CHECKING:
    from config import Config
    from store.offloop import OffLoop

    from .channels.base.notices import Notices
    from .channels.base.registry import Channels

log = logging.getLogger(__name__)

START_LIMIT = 120.0  # seconds the new agent gets to start and answer `initialize`


class Roster:
    def __init__(
        self,
        config: Config,
        specs: dict[str, AgentSpec],
        pool: Pool,
        aliases: dict[str, str],
        identities: Identities,
        rooms: tuple[OffLoop, Channels, Notices],
        socket: Callable[[], str | None],
        new_device: Callable[[str], Awaitable[None]] | None,
    ):
        """`socket`: where the MCP server listens (once it does); `new_device`: makes an identity's
        device (encryption on), else None."""
        self.config, self.specs, self.pool, self.aliases = config, specs, pool, aliases
        self.identities = identities
        self.db, self.channels, self.notices = rooms
        self.socket, self.new_device = socket, new_device
        self.lock = asyncio.Lock()  # one change of the config at a time

    async def add(self, agent_id: str, cwd: str | None) -> list[str]:
        """Add the registry's `agent_id`: the lines to tell the owner."""
        async with self.lock:
            try:
                written = agents_registry.written_cwd(cwd)
                added = await agents_registry.add_from_registry(
                    self.config.path, agent_id, written, self.config.registry, self.config.data_dir
                )
                fresh = await asyncio.to_thread(configuration.load, self.config.path)
            except (RegistryError, ConfigError, OSError) as exc:
                return [_why(exc)]
            name = added.name
            self.config.agents[name] = fresh.agents[name]
            spec = agent_specs.spec_of(self.config, name)
            self.specs[name] = spec
            agent_specs.reach_socket({name: spec}, self.socket())
            self.pool.add(name, spec)
            self.aliases.update({name: name, f"{self.config.puppet_prefix}{name}": name})
            puppet = await self.identities.puppet(name)
            if self.new_device is not None:
                await self.new_device(puppet.user_id)
        # its avatar (the registry's icon) while it starts, as at a bridge's start (matrix/avatars.py)
        pictures = {name: avatar} if (avatar := self.config.agents[name].avatar) else {}
        avatar_set = asyncio.ensure_future(avatars.ensure([puppet], self.db, pictures))
        started = await self._started(name)
        await avatar_set
        return [*added.lines, started, f"Open a DM with {puppet.user_id} (or `!dm {name}`)."]

    async def _started(self, name: str) -> str:
        """The new agent started once, as `sidekicks check` does: a ✓ or ✗ line."""
        try:
            agent = await asyncio.wait_for(self.pool.get(name), START_LIMIT)
        except Exception as exc:  # whatever the agent did, the owner reads one line
            return f"✗ {name}: {str(exc).removeprefix(f'{name}: ') or type(exc).__name__}"
        info = agent.info or {}
        return f"✓ {name}: {info.get('name', '?')} {info.get('version', '')}".rstrip()

    async def remove(self, name: str) -> list[str]:
        async with self.lock:
            if name not in self.config.agents:
                return [f"No agent {name!r} is configured ({', '.join(self.config.agents) or 'none'})."]
            try:
                await asyncio.to_thread(config_edit.remove_agent, self.config.path, name)
            except (ConfigError, OSError) as exc:
                return [_why(exc)]
            left = await self._leave_rooms(name)
            await self.pool.remove(name)
            self.specs.pop(name, None)
            for alias in [alias for alias, agent in self.aliases.items() if agent == name]:
                del self.aliases[alias]
            del self.config.agents[name]
        return [f"Removed {name} from {self.config.path}; it left {left} room(s)."]

    async def _leave_rooms(self, name: str) -> int:
        puppet = await self.identities.puppet(name)
        members = await self.db.members_of_agent(name)
        left = 0
        for member in members:
            channel = await self.db.channel(member.channel_id)
            if channel is None:
                continue
            portal = await self.channels.portal_for(channel.room_id)
            try:
                await self.notices.send(puppet, channel.room_id, f"{name} was removed from the config: leaving.")
                await puppet.intent.leave(channel.room_id)
            except Exception as exc:  # the room may be gone: the membership goes all the same
                log.warning("%s could not leave %s: %s", name, channel.room_id, exc)
            if portal is not None:
                await portal.left(name)
            else:
                await self.db.remove_member(channel.id, name)
            left += 1
        return left


def _why(exc: BaseException) -> str:
    if isinstance(exc, ConfigError):
        return "; ".join(exc.problems)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}"
    return str(exc)
