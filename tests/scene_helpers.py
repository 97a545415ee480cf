"""Pieces the unit tests' scenes (a part of the bridge built by hand around stand-ins) share.

    from scene_helpers import SentNotices, PortalNotices, store_with_channel

tests/ is on sys.path (tests/conftest.py); each test module's `scene` keeps what is its own.
"""

from __future__ import annotations

from store import Channel, Store


def store_with_channel(
    room_id: str = "!room:hs", name: str = "general", members: tuple[str, ...] = ("alice",)
) -> tuple[Store, Channel]:
    """An in-memory Store holding one channel (`room_id`, `name`) with `members`. Close it."""
    store = Store.open(":memory:")
    channel = store.create_channel(room_id, name)
    for member in members:
        store.add_member(channel.id, member)
    return store, channel


class SentNotices:
    """Stands in for bridge/channels/base/notices.py where a puppet's notices are sent (`send`):
    `said` holds (room id, text) of each, `by` the puppet that said it."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []
        self.by: list = []

    async def send(self, puppet, room_id, text, html=None):
        self.said.append((room_id, text))
        self.by.append(puppet)


class PortalNotices:
    """Stands in for bridge/channels/base/notices.py where a portal's notices are made (`notice`):
    `said` holds (text, relates_to) of each."""

    def __init__(self) -> None:
        self.said: list[tuple[str, dict | None]] = []

    async def notice(self, portal, text, puppet=None, relates_to=None):
        self.said.append((text, relates_to))
