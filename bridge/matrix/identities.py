"""The bridge's Matrix users: the bridge bot and one puppet per agent
(docs/architecture.md "The Matrix side").

Each has its Intent, the one way out (intent.py). This is the part the rest of the bridge is
handed to send as someone: `bot`, `puppet(agent)` (registered on first use), `everyone()`. The
bridge makes the bot when it starts, once there is an HTTP session to send with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp

from .intent import Outgoing
from .puppet import Puppet

if TYPE_CHECKING:
    from config import Config


class Identities:
    def __init__(self, config: Config, as_token: str, outgoing: Outgoing):
        self.config = config
        self.as_token = as_token
        self.outgoing = outgoing  # how their room events leave (encrypted with `encryption: on`)
        self.session: aiohttp.ClientSession | None = None
        self.bot: Puppet | None = None
        self.puppets: dict[str, Puppet] = {}

    def open(self, session: aiohttp.ClientSession) -> Puppet:
        """The bridge starts: its HTTP session, and the bot (registered by the caller)."""
        self.session = session
        self.bot = Puppet(
            self.config.bot_user_id,
            "Sidekicks",
            self.config.homeserver_url,
            self.as_token,
            session,
            outgoing=self.outgoing,
        )
        return self.bot

    async def puppet(self, agent: str) -> Puppet:
        """The puppet of `agent`, registered with the homeserver once."""
        puppet = self.puppets.get(agent)
        if puppet is None:
            title = self.config.agents[agent].title
            puppet = Puppet(
                self.config.puppet_user_id(agent),
                title,
                self.config.homeserver_url,
                self.as_token,
                self.session,
                agent=agent,
                outgoing=self.outgoing,
            )
            self.puppets[agent] = puppet
        await puppet.ensure_registered()
        return puppet

    def everyone(self) -> list[Puppet]:
        """The bot (once started) and every puppet made so far."""
        return [p for p in [self.bot, *self.puppets.values()] if p is not None]
