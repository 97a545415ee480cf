"""Permission requests in Matrix (SPEC §9): the puppet shows the tool call and numbered options,
the owner answers by reaction or by replying with the number.

Placeholder: wired in bridge.py; until it is built every request is answered `cancelled`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from acp import PermissionRequest

    from .bridge import Bridge
    from .portal import Portal
    from .puppet import Puppet


class Permissions:
    def __init__(self, bridge: "Bridge"):
        self.bridge = bridge

    async def ask(self, portal: "Portal", puppet: "Puppet", request: "PermissionRequest") -> str | None:
        """Ask the owner; the chosen optionId, or None for cancelled."""
        return None

    async def on_reaction(self, event: dict, room_id: str, sender: str, relates_to: dict) -> bool:
        """A reaction; True when it answered a pending permission request."""
        return False

    async def on_reply(self, event: dict, room_id: str, sender: str, body: str) -> bool:
        """An owner's message; True when it answered a pending request by number."""
        return False
