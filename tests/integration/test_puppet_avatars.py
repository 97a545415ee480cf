"""The puppets' avatars as a client sees them (docs/using.md "The first minutes"): in the member
events of their rooms, fetchable the way nheko 0.11 fetches them, and the registry's icon as the
avatar of an agent added from it (docs/configuration.md "Agents from the registry").

Real Synapse (the embedded homeserver's configuration), the real bridge, scripted agents, a
registry served by a local HTTP server.
"""

from __future__ import annotations

import os
import secrets

import aiohttp
import nio
import pytest
from aiohttp import web
from bridge_harness import agent, write_config
from bridge_harness import wait_until as until
from helpers import say
from matrix_helpers import notices, sync_until
from test_commands import open_bot_dm, room_with
from test_registry_agents import archive, served

import config
from bridge.agents_registry import add_from_registry
from bridge.matrix.avatars import icon_png, identicon, png

PICTURE = png(8, 8, lambda x, y: (200, 40 * (x % 4), 30))  # a raster icon
BOT = "@sidekicks:localhost"
ICON = b"""<svg width="16" height="16" viewBox="0 0 16 16" fill="none" xmlns="http://www.w3.org/2000/svg">
<path fill-rule="evenodd" d="M13 14H3V2H13V14ZM10.5 4.4H5.5V11.6H10.5V4.4Z" fill="currentColor"/>
</svg>"""  # the shape of opencode's icon in the ACP registry


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
    """A registry of two npx agents, `pic` with a PNG icon and `vec` with an SVG one, a `binary`
    agent `tiny-pic` (tests/agents/tiny_agent.py) with the SVG one, the icons, and a text that is
    no picture."""
    app, base = web.Application(), []

    async def registry_json(_request):
        entry = {"version": "1.0.0", "description": "x", "distribution": {"npx": {"package": "p"}}}
        target = {"archive": f"{base[0]}/tiny.tar.gz", "cmd": "./bin/tiny", "args": ["acp"]}
        binary = {"binary": {"linux-x86_64" if os.uname().machine == "x86_64" else "linux-aarch64": target}}
        return web.json_response(
            {
                "version": "1.0.0",
                "agents": [
                    {**entry, "id": "pic", "name": "Pic", "icon": f"{base[0]}/pic.png"},
                    {**entry, "id": "vec", "name": "Vec", "icon": f"{base[0]}/vec.svg"},
                    {**entry, "id": "tiny-pic", "name": "Tiny", "icon": f"{base[0]}/vec.svg", "distribution": binary},
                ],
            }
        )

    async def pic_png(_request):
        return web.Response(body=PICTURE, content_type="image/png")

    async def vec_svg(_request):
        return web.Response(body=ICON, content_type="image/svg+xml")

    async def text(_request):
        return web.Response(text="no picture")

    app.router.add_get("/registry.json", registry_json)
    app.router.add_get("/pic.png", pic_png)
    app.router.add_get("/vec.svg", vec_svg)

    async def tiny(_request):
        return web.Response(body=archive())

    app.router.add_get("/text.txt", text)
    app.router.add_get("/tiny.tar.gz", tiny)
    async with served(app, base) as url:
        yield url


async def test_an_agent_added_from_the_registry_wears_its_icon(
    homeserver, bridge_factory, tmp_path, owner, icon_registry
):
    """`agents add` writes the registry's icon as `avatar:`; the bridge uploads it once as the
    puppet's avatar — a PNG as it is, an SVG drawn into a PNG — and a URL that gives no picture
    gives the generated one."""
    added = write_config(homeserver, tmp_path / "added", {})
    for agent_id in ("pic", "vec"):
        await add_from_registry(added, agent_id, "~", f"{icon_registry}/registry.json", tmp_path, tools={"npx"})
    written = config.load(added).agents
    assert (written["pic"].avatar, written["vec"].avatar) == (f"{icon_registry}/pic.png", f"{icon_registry}/vec.svg")

    names = {kind: f"{kind}{secrets.token_hex(3)}" for kind in ("pic", "vec", "text")}
    users = {kind: f"@sk_{name}:localhost" for kind, name in names.items()}
    sources = {**{kind: written[kind].avatar for kind in ("pic", "vec")}, "text": f"{icon_registry}/text.txt"}
    running = await bridge_factory({names[k]: agent(avatar=sources[k]) for k in names}, folder=tmp_path / "bridge")
    for user in users.values():
        await until(lambda user=user: running.store.get_value(f"avatar:{user}"), what=user)
    shown = {kind: running.store.get_value(f"avatar:{user}") for kind, user in users.items()}
    assert await legacy_download(homeserver, shown["pic"]) == PICTURE
    assert await legacy_download(homeserver, shown["vec"]) == icon_png(ICON, users["vec"])
    assert await legacy_download(homeserver, shown["text"]) == identicon(users["text"])
    made_from = {kind: running.store.get_value(f"avatar_source:{user}") for kind, user in users.items()}
    assert made_from == {"pic": sources["pic"], "vec": sources["vec"], "text": ""}
    found = await owner.get_avatar(users["vec"])
    assert isinstance(found, nio.ProfileGetAvatarResponse) and found.avatar_url == shown["vec"]


async def test_an_agent_added_in_the_bots_dm_gets_its_icon_at_once(
    bridge_factory, tmp_path, owner, icon_registry, monkeypatch
):
    """`!agents add` while the bridge runs: the new puppet wears the registry's icon before the
    bot says it was added, without a restart."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    running = await bridge_factory({}, registry=f"{icon_registry}/registry.json")
    dm = await open_bot_dm(owner)
    before = len(notices(owner, dm, BOT))
    await say(owner, dm, f"!agents add tiny-pic --cwd {tmp_path}")
    await sync_until(owner, lambda: any("added tiny-pic" in n for n in notices(owner, dm, BOT)[before:]), timeout=120)
    user = "@sk_tiny-pic:localhost"
    assert running.store.get_value(f"avatar_source:{user}") == f"{icon_registry}/vec.svg"
    found = await owner.get_avatar(user)
    assert isinstance(found, nio.ProfileGetAvatarResponse)
    assert found.avatar_url == running.store.get_value(f"avatar:{user}")
