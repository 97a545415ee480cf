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
from nio import Api, AsyncClient, AsyncClientConfig
from nio.responses import ErrorResponse, RoomPutStateResponse, RoomRedactResponse, RoomSendResponse, UploadResponse

log = logging.getLogger(__name__)


class TooLarge(Exception):
    """A download was bigger than the limit it was given."""


class MatrixError(Exception):
    """A homeserver answer the bridge cannot work with; `status` is its HTTP status if known."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def transient(self) -> bool:
        """Worth asking again later: the homeserver was busy or broken (5xx, 429), or it is not
        known why. A 4xx is its considered refusal."""
        return self.status is None or self.status >= 500 or self.status == 429


def client_config() -> AsyncClientConfig:
    # Unlimited retries with capped backoff: a homeserver that is down mid-answer gets the
    # same request (same transaction id, so never twice) once it is back
    # (docs/reliability.md "The homeserver away").
    return AsyncClientConfig(
        max_timeouts=None,
        max_limit_exceeded=None,
        backoff_factor=0.2,
        max_timeout_retry_wait_time=5,
        request_timeout=30,
    )


class AppserviceClient(AsyncClient):
    """An AsyncClient acting as `user_id` through the application service's as_token."""

    def __init__(self, homeserver: str, user_id: str, as_token: str, session: aiohttp.ClientSession):
        super().__init__(homeserver, user=user_id, config=client_config())
        self.user_id = user_id
        self.access_token = as_token
        self.client_session = session  # shared; closed by the bridge, not by this client
        # a device of the user (the `device_id` masquerading parameter): set once the identity
        # has one; the homeserver then also keeps transaction ids across its own restarts
        self.masquerade_device: str | None = None

    def _as_user(self, path: str) -> str:
        query = f"user_id={quote(self.user_id, safe='')}"
        if self.masquerade_device:
            query += f"&device_id={quote(self.masquerade_device, safe='')}"
        return f"{path}{'&' if '?' in path else '?'}{query}"

    async def send(self, method, path, data=None, headers=None, trace_context=None, timeout=None):
        return await super().send(method, self._as_user(path), data, headers, trace_context, timeout)

    async def put_event(self, room_id: str, event_type: str, content: dict, txn_id: str):
        """PUT /rooms/{room}/send/{type}/{txn} with nio's retries, as is: unlike nio's
        room_send it never encrypts (bridge/matrix/intent.py decides what leaves, and how)."""
        method, path, data = Api.room_send(self.access_token, room_id, event_type, content, txn_id)
        return await self._send(RoomSendResponse, method, path, data, (room_id,))

    async def put_state(self, room_id: str, event_type: str, state_key: str, content: dict):
        """PUT /rooms/{room}/state/{type}/{key} with nio's retries (the slash stays for an
        empty key: not every homeserver routes the path without it)."""
        path = (
            f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/state/"
            f"{quote(event_type, safe='')}/{quote(state_key, safe='')}"
        )
        return await self._send(RoomPutStateResponse, "PUT", path, Api.to_json(content), (room_id,))

    async def redact_event(self, room_id: str, event_id: str, reason: str | None, txn_id: str):
        """PUT /rooms/{room}/redact/{event}/{txn} with nio's retries."""
        method, path, data = Api.room_redact(self.access_token, room_id, event_id, txn_id, reason)
        return await self._send(RoomRedactResponse, method, path, data, (room_id,))

    async def upload_bytes(self, data: bytes, content_type: str, filename: str):
        """POST /_matrix/media/v3/upload with nio's retries; an UploadResponse or error."""
        path = f"/_matrix/media/v3/upload?filename={quote(filename, safe='')}"
        return await self._send(UploadResponse, "POST", path, data, content_type=content_type, content_length=len(data))

    async def raw(
        self, method: str, path: str, body: Any = None, *, masquerade: bool = True, ok: tuple[int, ...] = (200,)
    ) -> tuple[int, dict]:
        """A request nio has no method for. Returns (status, json body)."""
        headers = {"Authorization": f"Bearer {self.access_token}", "Content-Type": "application/json"}
        if masquerade:
            path = self._as_user(path)
        data = None if body is None else json.dumps(body)
        async with self.client_session.request(method, self.homeserver + path, data=data, headers=headers) as response:
            try:
                payload = await response.json(content_type=None)
            except (ValueError, aiohttp.ContentTypeError):
                payload = {}
            return response.status, payload or {}

    async def download_bytes(self, path: str, limit: int) -> tuple[int, bytes, dict]:
        """GET a media `path` as this user: (status, the body if 200, else the error's JSON).
        The body is read in chunks and never past `limit` bytes: TooLarge."""
        headers = {"Authorization": f"Bearer {self.access_token}"}
        async with self.client_session.get(
            self.homeserver + self._as_user(path), headers=headers, timeout=aiohttp.ClientTimeout(total=300)
        ) as response:
            if response.status != 200:
                try:
                    error = await response.json(content_type=None)
                except (ValueError, aiohttp.ContentTypeError):
                    error = {}
                return response.status, b"", error if isinstance(error, dict) else {}
            if (response.content_length or 0) > limit:
                raise TooLarge(path)
            data = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > limit:
                    raise TooLarge(path)
            return 200, bytes(data), {}

    async def close(self):  # the shared session outlives each client
        return None


def check(response: Any, what: str) -> Any:
    """Raise MatrixError for an nio ErrorResponse, with the homeserver's words."""
    if isinstance(response, ErrorResponse):
        transport = getattr(response, "transport_response", None)
        status = getattr(transport, "status", None)
        raise MatrixError(
            f"{what}: {response.status_code} {response.message}", status if isinstance(status, int) else None
        )
    return response


def localpart(user_id: str) -> str:
    return user_id[1:].split(":", 1)[0]
