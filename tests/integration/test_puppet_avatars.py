"""The puppets' avatars as a client sees them (docs/using.md "The first minutes"): in the member
events of their rooms, and fetchable the way nheko 0.11 fetches them.

Real Synapse (the embedded homeserver's configuration), the real bridge, scripted agents.
"""

from __future__ import annotations

import secrets

import aiohttp
import nio
from bridge_harness import agent
from bridge_harness import wait_until as until
from test_commands import room_with


async def member_avatar(client: nio.AsyncClient, room_id: str, user_id: str) -> str | None:
    found = await client.room_get_state_event(room_id, "m.room.member", user_id)
    if not isinstance(found, nio.RoomGetStateEventResponse):
        return None
    url = found.content.get("avatar_url")
    return url if isinstance(url, str) else None


async def test_a_direct_chat_shows_the_puppets_avatar_to_an_older_client(homeserver, bridge_factory, tmp_path, owner):
    """The puppet's member event in a direct chat holds its profile's avatar (clients draw a
    member from it), and that picture downloads without a token, through the legacy media
    endpoint nheko 0.11 uses (bridge/local/homeserver.py `enable_authenticated_media`)."""
    name = f"framed{secrets.token_hex(3)}"
    puppet = f"@sk_{name}:localhost"
    running = await bridge_factory({name: agent(title="Framed")}, folder=tmp_path / "bridge")
    await until(lambda: running.store.get_value(f"avatar:{puppet}"), what="the puppet's avatar uploaded")
    stored = running.store.get_value(f"avatar:{puppet}")

    room = await room_with(owner, puppet, direct=True)

    async def shown() -> bool:
        return await member_avatar(owner, room, puppet) == stored

    await until(shown, what="the member event carries the avatar")
    server_name, media_id = stored.removeprefix("mxc://").split("/", 1)
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{homeserver.url}/_matrix/media/v3/download/{server_name}/{media_id}") as response,
    ):
        assert response.status == 200, await response.text()
        assert (await response.read()).startswith(b"\x89PNG")
