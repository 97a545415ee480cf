"""The application-service HTTP API the homeserver calls (Matrix AS API v1).

Every endpoint checks the hs_token in constant time and answers M_FORBIDDEN otherwise.
Transactions are idempotent: a transaction is recorded once its events are handled, and the same
transaction sent again (also after a restart — the keys are in the store) is acknowledged
without handling it again. The key is the id *and* the event ids it carries: Synapse on SQLite
numbers transactions from 1 again after a restart, so an id alone would drop new events.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from typing import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

TransactionHandler = Callable[[list[dict], list[dict]], Awaitable[None]]
UserQuery = Callable[[str], Awaitable[bool]]


def _forbidden() -> web.Response:
    return web.json_response({"errcode": "M_FORBIDDEN", "error": "Bad or missing hs_token"}, status=403)


def transaction_key(txn_id: str, events: list[dict]) -> str:
    ids = "\n".join(str(event.get("event_id", "")) for event in events)
    return f"{txn_id}:{hashlib.sha256(ids.encode('utf-8')).hexdigest()[:16]}"


class AppserviceServer:
    def __init__(self, hs_token: str, on_transaction: TransactionHandler, on_user_query: UserQuery,
                 txn_seen: Callable[[str], bool], mark_txn: Callable[[str], None]):
        self._token = hs_token.encode("utf-8")
        self._on_transaction = on_transaction
        self._on_user_query = on_user_query
        self._txn_seen = txn_seen
        self._mark_txn = mark_txn
        self._txn_lock = asyncio.Lock()  # one transaction at a time keeps events in order
        self.pinged = asyncio.Event()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        for prefix in ("/_matrix/app/v1", ""):  # unprefixed paths: legacy homeservers
            self.app.router.add_put(prefix + "/transactions/{txn_id}", self.transaction)
            self.app.router.add_get(prefix + "/users/{user_id}", self.user)
            self.app.router.add_get(prefix + "/rooms/{alias}", self.room)
        self.app.router.add_post("/_matrix/app/v1/ping", self.ping)
        self._runner: web.AppRunner | None = None

    def _authorised(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else request.query.get("access_token", "")
        return hmac.compare_digest(token.encode("utf-8"), self._token)

    async def transaction(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        txn_id = request.match_info["txn_id"]
        try:
            body = await request.json()
            events = body.get("events") or []
            ephemeral = body.get("ephemeral") or body.get("de.sorunome.msc2409.ephemeral") or []
            if not isinstance(events, list) or not isinstance(ephemeral, list):
                raise ValueError("events must be a list")
        except (ValueError, json.JSONDecodeError, AttributeError):
            return web.json_response({"errcode": "M_NOT_JSON", "error": "Body is not a transaction"},
                                     status=400)
        events = [e for e in events if isinstance(e, dict)]
        key = transaction_key(txn_id, events)
        async with self._txn_lock:
            if self._txn_seen(key):
                return web.json_response({})
            await self._on_transaction(events, [e for e in ephemeral if isinstance(e, dict)])
            self._mark_txn(key)
        return web.json_response({})

    async def user(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        if await self._on_user_query(request.match_info["user_id"]):
            return web.json_response({})
        return web.json_response({"errcode": "M_NOT_FOUND", "error": "No such agent"}, status=404)

    async def room(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        return web.json_response({"errcode": "M_NOT_FOUND", "error": "No room aliases here"}, status=404)

    async def ping(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _forbidden()
        self.pinged.set()
        return web.json_response({})

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, reuse_address=True).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
