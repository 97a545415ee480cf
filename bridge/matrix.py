"""Talking to the homeserver as the application service.

matrix-nio has no appservice support, so `AppserviceClient` is an `AsyncClient` whose every
request carries the as_token and `?user_id=` (masquerading, as the Matrix AS API defines).
One client per puppet (and one for the bridge bot) shares a single aiohttp session.
"""
from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

import aiohttp
from nio import AsyncClient, AsyncClientConfig
from nio.responses import ErrorResponse

log = logging.getLogger(__name__)


class MatrixError(Exception):
    """A homeserver answer the bridge cannot work with."""


def client_config() -> AsyncClientConfig:
    # Unlimited retries with capped backoff: a homeserver that is down mid-answer gets the
    # same request (same transaction id, so never twice) once it is back (SPEC §11).
    return AsyncClientConfig(max_timeouts=None, max_limit_exceeded=None, backoff_factor=0.2,
                             max_timeout_retry_wait_time=5, request_timeout=30)


class AppserviceClient(AsyncClient):
    """An AsyncClient acting as `user_id` through the application service's as_token."""

    def __init__(self, homeserver: str, user_id: str, as_token: str,
                 session: aiohttp.ClientSession):
        super().__init__(homeserver, user=user_id, config=client_config())
        self.user_id = user_id
        self.access_token = as_token
        self.client_session = session  # shared; closed by the bridge, not by this client

    async def send(self, method, path, data=None, headers=None, trace_context=None, timeout=None):
        joiner = "&" if "?" in path else "?"
        path = f"{path}{joiner}user_id={quote(self.user_id, safe='')}"
        return await super().send(method, path, data, headers, trace_context, timeout)

    async def raw(self, method: str, path: str, body: Any = None, *, masquerade: bool = True,
                  ok: tuple[int, ...] = (200,)) -> tuple[int, dict]:
        """A request nio has no method for. Returns (status, json body)."""
        headers = {"Authorization": f"Bearer {self.access_token}", "Content-Type": "application/json"}
        if masquerade:
            path = f"{path}{'&' if '?' in path else '?'}user_id={quote(self.user_id, safe='')}"
        data = None if body is None else json.dumps(body)
        async with self.client_session.request(method, self.homeserver + path, data=data,
                                               headers=headers) as response:
            try:
                payload = await response.json(content_type=None)
            except (ValueError, aiohttp.ContentTypeError):
                payload = {}
            return response.status, payload or {}

    async def close(self):  # the shared session outlives each client
        return None


def check(response: Any, what: str) -> Any:
    """Raise MatrixError for an nio ErrorResponse, with the homeserver's words."""
    if isinstance(response, ErrorResponse):
        raise MatrixError(f"{what}: {response.status_code} {response.message}")
    return response


def localpart(user_id: str) -> str:
    return user_id[1:].split(":", 1)[0]
