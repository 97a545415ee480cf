"""Bridge commands: `!help`, `!agents`, ... in the bridge bot's DM, `!stop`, `!commands`,
`!delete` in a channel (SPEC §5). `!` is the bridge's; `/` belongs to agents (ADR §6).

Placeholder: the dispatch is wired in bridge.py; the commands themselves are still to come.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .bridge import Bridge


class BotCommands:
    def __init__(self, bridge: "Bridge"):
        self.bridge = bridge

    async def handle(self, event: dict, room_id: str, sender: str, body: str) -> bool:
        """An owner's `!…` message. True when it was a bridge command (then no agent sees it)."""
        return False

    async def on_bot_member(self, event: dict, room_id: str, sender: str, content: dict) -> None:
        """A membership event about the bridge bot (e.g. the owner opening a DM with it)."""

    async def tell_owners(self, text: str) -> None:
        """Say something to every owner in their DM with the bridge bot."""
