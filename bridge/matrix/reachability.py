"""Whether the homeserver answers the bridge, and when it answers again after failing.

A homeserver killed and started again can lose events the bridge never got: Synapse hands an
appservice's events to an in-memory queue (and into transactions it may not send again until
another failure) after moving its stream position past them, so a `kill -9` while owner messages
wait in that queue loses them for the appservice API. The bridge sees the homeserver go: its own
requests (streamed answers, typing, presence, receipts) cannot connect. When one is answered
again, `on_back(since)` is told the time the first one failed, and the bridge reads the recent
messages of its channels (channels/events/inbound.py `catch_up_since`): what it missed goes through the
dispatcher like any event, once (events already handled are recognised by their id).

One `aiohttp.TraceConfig` on the bridge's HTTP session watches every request to the homeserver.
A bridge that sends nothing (no answer streams, nobody writes) would not see the homeserver go:
`watch` asks it something when no request was made for IDLE_PING seconds, and every AWAY_PING
seconds while it is away, so a homeserver killed while the bridge is idle is noticed, and read
back once it answers again. What it asks is the bot's pushers (ASK): every homeserver has them,
they cost nothing, and Synapse serves them only in its main process, so on Synapse with workers
the ask reaches the main process — a cheap read such as the client API versions would be answered
by a worker and miss the main process gone (docs/outages.md "Synapse with workers").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

IDLE_PING = 15.0  # seconds without a request to the homeserver before the bridge asks it
AWAY_PING = 2.0  # seconds between asks while it is away
PING_TIMEOUT = 10.0
ASK = "/_matrix/client/v3/pushers"  # what an idle bridge asks (the bot's pushers: none)


class Reachability:
    def __init__(self, on_back: Callable[[float], None], clock: Callable[[], float] = time.time) -> None:
        self._on_back, self._clock = on_back, clock
        self.away_since: float | None = None  # when a request first failed, while none is answered
        self._last = time.monotonic()  # when the last request to the homeserver ended

    def failed(self) -> None:
        if self.away_since is None:
            self.away_since = self._clock()

    def answered(self) -> None:
        since, self.away_since = self.away_since, None
        if since is not None:
            self._on_back(since)

    def trace_config(self) -> aiohttp.TraceConfig:
        """For the bridge's `aiohttp.ClientSession(trace_configs=[...])`."""
        config = aiohttp.TraceConfig()

        async def on_end(session, context, params: aiohttp.TraceRequestEndParams) -> None:
            self._last = time.monotonic()
            if params.response.status in (502, 503, 504):  # a proxy in front of one that is not up
                self.failed()
            else:
                self.answered()

        async def on_exception(session, context, params: aiohttp.TraceRequestExceptionParams) -> None:
            # only a connection refused or unreachable: a keep-alive connection the homeserver
            # closed under a request (ServerDisconnectedError) or a slow answer is not a
            # homeserver gone — a killed one refuses the retries until it is back
            self._last = time.monotonic()
            if isinstance(params.exception, aiohttp.ClientConnectorError):
                self.failed()

        config.on_request_end.append(on_end)
        config.on_request_exception.append(on_exception)
        return config

    async def watch(self, session: aiohttp.ClientSession, homeserver_url: str, token: str = "") -> None:
        """Until cancelled: ask the homeserver (ASK, as the bot: `token`) when the bridge has not
        for IDLE_PING seconds (every AWAY_PING while it is away), through `session` (whose trace
        config is this one's). Any answer but a proxy's 502/503/504 is the homeserver there."""
        url = f"{homeserver_url.rstrip('/')}{ASK}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        while True:
            every = AWAY_PING if self.away_since is not None else IDLE_PING
            wait = self._last + every - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            try:
                timeout = aiohttp.ClientTimeout(total=PING_TIMEOUT)
                async with session.get(url, headers=headers, timeout=timeout) as response:
                    await response.read()
            except (TimeoutError, aiohttp.ClientError):
                pass  # the trace config saw it
            self._last = time.monotonic()
