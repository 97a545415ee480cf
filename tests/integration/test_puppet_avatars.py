"""The puppets' avatars as a client sees them (docs/using.md "The first minutes"): in the member
events of their rooms, fetchable the way nheko 0.11 fetches them, and the registry's icon as the
avatar of an agent added from it (docs/configuration.md "Agents from the registry").

Real Synapse (the embedded homeserver's configuration), the real bridge, scripted agents, a
registry served by a local HTTP server.
"""

from __future__ import annotations

import secrets

import aiohttp
import nio
import pytest
from aiohttp import web
from bridge_harness import agent, write_config
from bridge_harness import wait_until as until
from test_commands import room_with

import config
from bridge.agents_registry import add_from_registry
from bridge.matrix.avatars import identicon, png

ICON = png(8, 8, lambda x, y: (200, 40 * (x % 4), 30))  # the registry's raster icon


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
    assert (await legacy_download(homeserver, stored)).startswith(b"\x89PNG")


async def legacy_download(homeserver, mxc: str) -> bytes:
    """The media at `mxc` through `/_matrix/media/v3/download`, without a token (nheko 0.11's way)."""
    server_name, media_id = mxc.removeprefix("mxc://").split("/", 1)
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{homeserver.url}/_matrix/media/v3/download/{server_name}/{media_id}") as response,
    ):
        assert response.status == 200, await response.text()
        return await response.read()


@pytest.fixture
async def icon_registry():
    """A registry of two npx agents, `pic` with a PNG icon and `vec` with an SVG one, and the icons."""
    app, base = web.Application(), []

    async def registry_json(_request):
        entry = {"version": "1.0.0", "description": "x", "distribution": {"npx": {"package": "p"}}}
        return web.json_response(
            {
                "version": "1.0.0",
                "agents": [
                    {**entry, "id": "pic", "name": "Pic", "icon": f"{base[0]}/pic.png"},
                    {**entry, "id": "vec", "name": "Vec", "icon": f"{base[0]}/vec.svg"},
                ],
            }
        )

    async def pic_png(_request):
        return web.Response(body=ICON, content_type="image/png")

    async def vec_svg(_request):
        return web.Response(text="<svg/>", content_type="image/svg+xml")

    app.router.add_get("/registry.json", registry_json)
    app.router.add_get("/pic.png", pic_png)
    app.router.add_get("/vec.svg", vec_svg)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
    yield base[0]
    await runner.cleanup()


async def test_an_agent_added_from_the_registry_wears_its_raster_icon(
    homeserver, bridge_factory, tmp_path, owner, icon_registry
):
    """`agents add` writes a PNG icon as `avatar:` and not an SVG one; the bridge uploads the
    picture once as the puppet's avatar, and a picture it cannot show gives the generated one."""
    added = write_config(homeserver, tmp_path / "added", {})
    for agent_id in ("pic", "vec"):
        await add_from_registry(added, agent_id, "~", f"{icon_registry}/registry.json", tmp_path, tools={"npx"})
    written = config.load(added).agents
    assert written["pic"].avatar == f"{icon_registry}/pic.png"
    assert written["vec"].avatar is None

    pic, vec = f"pic{secrets.token_hex(3)}", f"vec{secrets.token_hex(3)}"
    agents = {pic: agent(avatar=written["pic"].avatar), vec: agent(avatar=f"{icon_registry}/vec.svg")}
    running = await bridge_factory(agents, folder=tmp_path / "bridge")
    for name in (pic, vec):
        await until(lambda name=name: running.store.get_value(f"avatar:@sk_{name}:localhost"), what=name)
    shown = running.store.get_value(f"avatar:@sk_{pic}:localhost")
    assert running.store.get_value(f"avatar_source:@sk_{pic}:localhost") == f"{icon_registry}/pic.png"
    assert await legacy_download(homeserver, shown) == ICON
    fallback = running.store.get_value(f"avatar:@sk_{vec}:localhost")
    assert running.store.get_value(f"avatar_source:@sk_{vec}:localhost") == ""
    assert await legacy_download(homeserver, fallback) == identicon(f"@sk_{vec}:localhost")
    found = await owner.get_avatar(f"@sk_{pic}:localhost")
    assert isinstance(found, nio.ProfileGetAvatarResponse) and found.avatar_url == shown
