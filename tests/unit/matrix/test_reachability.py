"""The homeserver away and back (matrix/reachability.py), seen through the bridge's HTTP session:
a request that cannot connect marks it away (a connection closed under a request does not); the
next one answered tells `on_back` once, with the time of the first failure."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from bridge.matrix.reachability import Reachability


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_failed_connection_then_an_answer_tells_once_since_when():
    backs, now = [], iter([100.0, 101.0, 102.0])
    reach = Reachability(backs.append, clock=lambda: next(now))

    async def ok(request):
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/ok", ok)
    server = TestServer(app)
    await server.start_server()
    closed = f"http://127.0.0.1:{free_port()}/ok"
    try:
        async with aiohttp.ClientSession(trace_configs=[reach.trace_config()]) as session:
            async with session.get(server.make_url("/ok")) as response:
                assert response.status == 200
            assert backs == [] and reach.away_since is None  # never away: nothing to tell
            for _ in range(2):  # the homeserver is down: both fail, the first one counts
                try:
                    async with session.get(closed):
                        pass
                except aiohttp.ClientConnectionError:
                    pass
            assert reach.away_since == 100.0 and backs == []
            async with session.get(server.make_url("/ok")) as response:
                assert response.status == 200
            assert backs == [100.0] and reach.away_since is None
            async with session.get(server.make_url("/ok")):
                pass
            assert backs == [100.0]  # told once
    finally:
        await server.close()


def test_away_is_told_once_from_the_first_failure():
    backs = []
    reach = Reachability(backs.append, clock=lambda: 5.0)
    reach.failed()
    reach.failed()
    reach.answered()
    assert backs == [5.0]


async def test_a_connection_closed_under_a_request_is_not_the_homeserver_gone():
    # a keep-alive connection the homeserver closed as a request went out: it is up (the request
    # is sent again); only a connection refused says it is gone
    backs = []
    reach = Reachability(backs.append, clock=lambda: 1.0)

    async def hang_up(reader, writer):
        await reader.readline()
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession(trace_configs=[reach.trace_config()]) as session:
            try:
                async with session.get(f"http://127.0.0.1:{port}/"):
                    pass
            except aiohttp.ServerDisconnectedError:
                pass
            else:
                raise AssertionError("the stand-in answered")
        assert reach.away_since is None and backs == []
    finally:
        server.close()
        await server.wait_closed()


async def test_an_idle_bridge_asks_the_homeserver_and_notices_it_gone_and_back(monkeypatch):
    # nothing else is sent: only the watch's own asks see the homeserver go and come back
    from bridge.matrix import reachability

    monkeypatch.setattr(reachability, "IDLE_PING", 0.05)
    monkeypatch.setattr(reachability, "AWAY_PING", 0.05)
    asked, backs = [], []
    reach = Reachability(backs.append)

    async def pushers(request):
        asked.append(request.headers.get("Authorization"))
        return web.json_response({"pushers": []})

    app = web.Application()
    app.router.add_get(reachability.ASK, pushers)
    port = free_port()

    async def serve() -> web.AppRunner:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    async def until(predicate) -> None:
        for _ in range(400):
            if predicate():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("still false after 4 s")

    runner = await serve()
    async with aiohttp.ClientSession(trace_configs=[reach.trace_config()]) as session:
        watching = asyncio.ensure_future(reach.watch(session, f"http://127.0.0.1:{port}/", "bot-token"))
        try:
            await until(lambda: len(asked) >= 2)  # asked again and again while nothing else is sent
            assert set(asked) == {"Bearer bot-token"}  # as the bot
            assert reach.away_since is None and backs == []
            await runner.cleanup()  # the homeserver goes away
            await until(lambda: reach.away_since is not None)
            assert backs == []
            runner = await serve()  # and comes back
            await until(lambda: backs)
            assert backs == [backs[0]] and reach.away_since is None
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            await runner.cleanup()
