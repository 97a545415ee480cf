"""The echo floor: a bare aiohttp application service, no store, no routing.

It acknowledges each transaction at once and, for every m.room.message not its own, sends
"echo: <body>" into the room as its bot. Same homeserver, same process, same loop as the bridge.
In the rooms of `declaring` its echo declares its mentions (`"m.mentions": {}`), as
docs/architecture.md "The Matrix side" asks of every message the bridge sends: Synapse's validation
of that key costs it time of its own.
"""

from __future__ import annotations

import asyncio
import secrets
import time

import aiohttp
from aiohttp import web
from common import FLOOR_BOT, q


class EchoFloor:
    def __init__(self, hs_url: str, registration: dict, port: int):
        self.hs = hs_url
        self.reg = registration
        self.port = port
        self.bot = f"@{FLOOR_BOT}:localhost"
        self.http: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None
        self.tasks: set[asyncio.Task] = set()
        self.answered = 0
        self.declaring: set[str] = set()  # rooms where the echo carries "m.mentions": {}
        # per echoed token: (transaction in, send started, send answered), perf_counter stamps
        self.stamps: dict[str, tuple[float, float, float]] = {}

    async def start(self) -> None:
        self.http = aiohttp.ClientSession()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_put("/_matrix/app/v1/transactions/{txn}", self.transaction)
        app.router.add_post("/_matrix/app/v1/ping", lambda r: web.json_response({}))
        app.router.add_get("/_matrix/app/v1/users/{user}", lambda r: web.json_response({}))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True).start()
        await self.call(
            "POST",
            "/_matrix/client/v3/register",
            {"type": "m.login.application_service", "username": FLOOR_BOT, "inhibit_login": True},
            masquerade=False,
        )

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.runner:
            await self.runner.cleanup()
        if self.http:
            await self.http.close()

    async def call(self, method: str, path: str, body=None, masquerade: bool = True) -> dict:
        if masquerade:
            path += ("&" if "?" in path else "?") + f"user_id={q(self.bot)}"
        async with self.http.request(
            method, self.hs + path, json=body, headers={"Authorization": f"Bearer {self.reg['as_token']}"}
        ) as r:
            return await r.json(content_type=None)

    async def join(self, room_id: str) -> None:
        await self.call("POST", f"/_matrix/client/v3/join/{q(room_id)}", {})

    async def transaction(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.reg['hs_token']}":
            return web.json_response({"errcode": "M_FORBIDDEN"}, status=403)
        body = await request.json()
        for event in body.get("events") or []:
            if event.get("type") != "m.room.message" or event.get("sender") == self.bot:
                continue
            text = (event.get("content") or {}).get("body", "")
            task = asyncio.create_task(self.answer(event["room_id"], "echo: " + text, time.perf_counter()))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return web.json_response({})

    async def answer(self, room_id: str, text: str, arrived: float) -> None:
        started = time.perf_counter()
        content = {"msgtype": "m.text", "body": text}
        if room_id in self.declaring:
            content["m.mentions"] = {}
        await self.call(
            "PUT", f"/_matrix/client/v3/rooms/{q(room_id)}/send/m.room.message/{secrets.token_hex(8)}", content
        )
        self.stamps[text.removeprefix("echo: ")] = (arrived, started, time.perf_counter())
        self.answered += 1
