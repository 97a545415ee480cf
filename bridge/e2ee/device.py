"""The device of one Matrix identity of the bridge (a puppet or the bot).

Kept under `<data dir>/e2ee/<localpart>/` (folder 0700, files 0600):
- `device.json`: the device id, its access token, the crypto store's pickle key, the /sync
  token, the cross-signing seeds, and whether the device's keys were published;
- `crypto.db`: matrix-nio's crypto store (Olm account, Olm sessions with other devices, the
  room keys received, the devices of the users it shares rooms with).

The device is made once, by `m.login.application_service` (the appservice's as_token), and the
same one is used on every start: a new device per start would leave earlier room keys behind.
A store that is lost or unreadable (or whose keys do not match what was published) makes a new
device, said in the log and to the owner once (`renewed`).

Crypto traffic reaches the device through its own `/sync`, filtered to what crypto needs
(to-device messages, device lists, one-time-key counts, and the rooms' memberships and
encryption state), which any homeserver serves. The sync token is saved only once the sync's
to-device messages have been handled — the room keys they carry are in the store by then — so a
restart or a `kill -9` never skips a key: an unsaved token means the same messages come again.

The bot is the exception: Synapse serves no `/sync` to an appservice's own sender user. Its
crypto traffic comes in the appservice's transactions instead, where the homeserver sends it
(MSC2409 to-device messages, MSC3202 key counts and device lists; `receive_traffic`), handled
before the transaction is acknowledged — so the same holds: a key not stored means the
transaction comes again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import nio
from nio.crypto import OutboundGroupSession, OutgoingKeyRequest
from nio.store import SqliteStore

from config.paths import write_private

from ..matrix.client import MatrixError
from .crosssign import CrossSigning

log = logging.getLogger(__name__)

MEGOLM = "m.megolm.v1.aes-sha2"
SYNC_TIMEOUT_MS = 30_000
STATE_TYPES = ["m.room.member", "m.room.encryption", "m.room.create"]
# what the device's /sync asks for: crypto traffic and the state that says who gets room keys
SYNC_FILTER = {
    "presence": {"types": []},
    "account_data": {"types": []},
    "room": {
        "state": {"types": STATE_TYPES, "lazy_load_members": False},
        "timeline": {"types": STATE_TYPES, "limit": 50, "lazy_load_members": False},
        "ephemeral": {"types": []},
        "account_data": {"types": []},
    },
}
OWN_SESSIONS_KEPT = 200  # room keys of this device given again when an owner's device asks
DEFAULT_ROTATION_MS = 7 * 24 * 3600 * 1000
DEFAULT_ROTATION_MSGS = 100
HOUSEKEEPING_TRIES = 3  # key uploads a sync tries before it goes on without them


def _q(value: str) -> str:
    return quote(value, safe="")


class Outbound:
    """The room key this identity encrypts with in one room, and who has it."""

    def __init__(self, members: set[str], rotation_ms: int, rotation_msgs: int):
        self.session = OutboundGroupSession()
        self.session.max_age = timedelta(milliseconds=rotation_ms)
        self.session.max_messages = rotation_msgs
        self.session.shared = True  # shared device by device: `shared_with` says with whom
        self.members = members
        self.shared_with: set[tuple[str, str]] = set()

    @property
    def expired(self) -> bool:
        return bool(self.session.expired)


class Device:
    """One identity's device: login, keys, /sync, room keys in and out."""

    def __init__(
        self,
        user_id: str,
        homeserver: str,
        as_token: str,
        folder: Path,
        on_room_key: Callable[[Device, str, str], None] | None = None,
        syncs: bool = True,
        may_request: Callable[[str], bool] | None = None,
    ):
        self.user_id = user_id
        # who may ask this device for its room keys (the owners; in rooms they are in)
        self.may_request = may_request or (lambda user_id: False)
        # Synapse serves no /sync to an appservice's own sender user (the bridge bot): its
        # device sends encrypted, with the rooms' members read when it needs them, and gets its
        # crypto traffic from the appservice's transactions where the homeserver sends it
        # (`receive_traffic`); where not, it reads nothing
        self.syncs = syncs
        self.homeserver = homeserver
        self.as_token = as_token
        self.folder = folder
        self.on_room_key = on_room_key or (lambda device, room_id, session_id: None)
        self.nio: nio.AsyncClient | None = None
        self.state: dict[str, Any] = {}
        self.renewed: str | None = None  # why the device was made anew (the store was lost)
        self.outbound: dict[str, Outbound] = {}
        self._room_locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task | None = None
        self._http: aiohttp.ClientSession | None = None
        self._synced = asyncio.Condition()
        self._syncs = 0
        self._query_lock = asyncio.Lock()
        self._indices: dict[tuple[str, int], str] = {}  # (session, message index) → event id
        self.settings: dict[str, dict] = {}  # room → its m.room.encryption content

    @property
    def device_id(self) -> str:
        return self.state["device_id"]

    # ---- files --------------------------------------------------------------------------------

    @property
    def _state_path(self) -> Path:
        return self.folder / "device.json"

    def _save(self) -> None:
        write_private(self._state_path, json.dumps(self.state, indent=1))

    def _load(self) -> dict:
        try:
            state = json.loads(self._state_path.read_text(encoding="utf-8"))
            return state if isinstance(state, dict) else {}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error(
                "%s: the device file %s cannot be read (%s): a new device is made", self.user_id, self._state_path, exc
            )
            self.renewed = f"its device file could not be read ({exc})"
            return {}

    def _remove_store(self) -> None:
        for path in self.folder.glob("crypto.db*"):
            path.unlink(missing_ok=True)

    # ---- start and stop -----------------------------------------------------------------------

    async def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.folder, 0o700)
        self.state = self._load()
        had_device = bool(self.state.get("device_id"))
        store_there = (self.folder / "crypto.db").exists()
        if had_device and self.state.get("published") and not store_there:
            log.error(
                "%s: the crypto store of device %s is missing: a new device is made",
                self.user_id,
                self.state["device_id"],
            )
            self.renewed = "its crypto store was missing"
            self.state = {}
        if not self.state.get("device_id"):
            self._remove_store()
        await self._login()
        if not self._open_store():
            # unreadable, or its Olm account is not the one published: a new device
            await self._close_client()
            self._remove_store()
            self.state = {}
            await self._login()
            if not self._open_store():
                raise MatrixError(f"{self.user_id}: the crypto store cannot be opened", None)
        await self._publish_keys()
        await self._cross_sign()
        if self.syncs:
            await self._sync_once(full_state=True)
            self._task = asyncio.create_task(self._sync_forever(), name=f"sync {self.user_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close_client()
        if self._http is not None:
            await self._http.close()

    async def _close_client(self) -> None:
        if self.nio is not None:
            try:
                await self.nio.close()
            except Exception:
                pass
            if self.nio.store is not None:
                try:
                    self.nio.store.database.close()
                except Exception:
                    pass
            self.nio = None

    async def _raw(
        self, method: str, path: str, body: Any = None, token: str | None = None, ok=(200,)
    ) -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token or self.state.get('access_token')}"}
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
        if True:
            async with self._http.request(
                method, self.homeserver + path, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=60)
            ) as response:
                try:
                    payload = await response.json(content_type=None)
                except ValueError:
                    payload = {}
                return response.status, payload if isinstance(payload, dict) else {}

    async def _login(self) -> None:
        """Reuse the saved token when it still works; else log in again with the same device
        id (the homeserver keeps the device and its keys), or get a new device."""
        token = self.state.get("access_token")
        if token:
            status, body = await self._raw("GET", "/_matrix/client/v3/account/whoami")
            if status == 200 and body.get("device_id") == self.state.get("device_id"):
                return
            if status not in (401, 403) and status != 200:
                raise MatrixError(f"{self.user_id}: whoami: {status} {body.get('error', body)}", status)
        request: dict[str, Any] = {
            "type": "m.login.application_service",
            "identifier": {"type": "m.id.user", "user": self.user_id[1:].split(":", 1)[0]},
            "initial_device_display_name": "Sidekicks bridge",
        }
        if self.state.get("device_id"):
            request["device_id"] = self.state["device_id"]
        status, body = await self._raw("POST", "/_matrix/client/v3/login", request, token=self.as_token)
        if status != 200 or not isinstance(body.get("access_token"), str):
            raise MatrixError(f"{self.user_id}: login: {status} {body.get('error', body)}", status)
        if self.state.get("device_id") and body.get("device_id") != self.state["device_id"]:
            self.state = {}  # another device: its store is not ours
            self._remove_store()
        self.state.update(device_id=body["device_id"], access_token=body["access_token"])
        self.state.setdefault("pickle_key", secrets.token_urlsafe(32))
        self._save()
        log.info("%s: device %s logged in", self.user_id, body["device_id"])

    def _open_store(self) -> bool:
        config = nio.AsyncClientConfig(
            encryption_enabled=True,
            store=SqliteStore,
            store_name="crypto.db",
            pickle_key=self.state["pickle_key"],
            store_sync_tokens=False,
            request_timeout=60,
            max_timeouts=None,
            max_limit_exceeded=None,
            backoff_factor=0.2,
            max_timeout_retry_wait_time=5,
        )
        client = nio.AsyncClient(
            self.homeserver, self.user_id, device_id=self.device_id, store_path=str(self.folder), config=config
        )
        try:
            client.restore_login(self.user_id, self.device_id, self.state["access_token"])
        except Exception as exc:
            log.error(
                "%s: the crypto store of device %s cannot be read (%s): a new device is made",
                self.user_id,
                self.device_id,
                exc,
            )
            self.renewed = f"its crypto store could not be read ({exc})"
            asyncio.ensure_future(client.close())
            return False
        for path in self.folder.glob("crypto.db*"):
            os.chmod(path, 0o600)
        account = client.olm.account
        published = self.state.get("published")
        if published and (not account.shared or published != account.identity_keys["ed25519"]):
            log.error(
                "%s: the crypto store of device %s does not hold the keys the device published: a new device is made",
                self.user_id,
                self.device_id,
            )
            self.renewed = "its crypto store did not hold the device's keys"
            asyncio.ensure_future(client.close())
            return False
        self.nio = client
        client.add_to_device_callback(self._room_key, (nio.RoomKeyEvent, nio.ForwardedRoomKeyEvent))
        nio_accepts = client.olm._should_accept_forward  # nio: only from our own verified devices
        client.olm._should_accept_forward = (  # type: ignore[method-assign]
            lambda sender, sender_key, event: (
                nio_accepts(sender, sender_key, event) or self._accept_forward(sender, sender_key, event)
            )
        )
        return True

    def _accept_forward(self, sender: str, sender_key: str, event: nio.ForwardedRoomKeyEvent) -> bool:
        """A room key forwarded to this device that nio would drop (it takes forwarded keys
        only from its own user's verified devices): taken when it answers a request of ours
        (request_key) and comes, Olm-encrypted, from an owner's device that made the session
        itself — no forwarding chain, the session's sender key is the forwarder's, its claimed
        ed25519 key that device's. That is what an m.room_key from that device would be."""
        olm = self.nio.olm
        request = olm.outgoing_key_requests.get(event.session_id)
        content = event.source.get("content") if isinstance(event.source, dict) else None
        if (
            request is None
            or not isinstance(content, dict)
            or event.algorithm != MEGOLM
            or event.room_id != request.room_id
            or not self.may_request(sender)
        ):
            return False
        if content.get("sender_key") != sender_key or content.get("forwarding_curve25519_key_chain"):
            return False  # passed along by another device: not the maker's word
        device = olm.device_store.device_from_sender_key(sender, sender_key)
        if device is None or device.ed25519 != content.get("sender_claimed_ed25519_key"):
            return False
        log.info(
            "%s: the room key of %s came from %s's device %s, as asked",
            self.user_id,
            event.room_id,
            sender,
            device.device_id,
        )
        return True

    # ---- keys -----------------------------------------------------------------------------------

    async def _publish_keys(self, tries: int | None = None) -> None:
        """Upload the device keys and one-time keys that need it, with backoff; at most `tries`
        attempts (None: until it is done). A refusal can last (a kill -9 lost the record of keys
        the homeserver holds: "already exists"), and sending needs none of them: the sync's
        housekeeping tries a few times and goes on, so the sync and the sends behind it are not held."""
        delay, tried = 0.5, 0
        while self.nio.should_upload_keys:
            response = await self.nio.keys_upload()
            if isinstance(response, nio.KeysUploadResponse):
                break
            tried += 1
            if tries is not None and tried >= tries:
                log.warning("%s: key upload failed (%s); left for later", self.user_id, response)
                return
            log.warning("%s: key upload failed (%s); trying again in %.1f s", self.user_id, response, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30)
        ed25519 = self.nio.olm.account.identity_keys["ed25519"]
        if self.state.get("published") != ed25519:
            self.state["published"] = ed25519
            self._save()

    async def _cross_sign(self) -> None:
        """Cross-signing keys once per identity, and this device signed by them."""
        if self.state.get("signed_device") == self.device_id:
            return
        cross = CrossSigning(self.user_id, self.state.get("cross_signing"))
        if "cross_signing" not in self.state:
            # as the appservice (as_token, masquerading): a first upload needs no interactive
            # auth (MSC3967), nor does replacing keys lost with the data folder (MSC4190)
            status, body = await self._raw(
                "POST",
                f"/_matrix/client/v3/keys/device_signing/upload?user_id={_q(self.user_id)}",
                cross.upload_body(),
                token=self.as_token,
            )
            if status != 200:
                log.warning(
                    "%s: cross-signing keys not uploaded: %s %s (the device stays unsigned)",
                    self.user_id,
                    status,
                    body.get("error", body),
                )
                return
            self.state["cross_signing"] = cross.seeds()
            self._save()
        status, body = await self._raw(
            "POST", "/_matrix/client/v3/keys/query", {"device_keys": {self.user_id: [self.device_id]}}
        )
        device_keys = ((body.get("device_keys") or {}).get(self.user_id) or {}).get(self.device_id)
        if status != 200 or not isinstance(device_keys, dict):
            log.warning("%s: own device keys not found (%s): the device stays unsigned", self.user_id, status)
            return
        signed = cross.sign_device(device_keys)
        status, body = await self._raw(
            "POST", "/_matrix/client/v3/keys/signatures/upload", {self.user_id: {self.device_id: signed}}
        )
        if status != 200 or body.get("failures"):
            log.warning("%s: device signature refused: %s %s", self.user_id, status, body)
            return
        self.state["signed_device"] = self.device_id
        self._save()
        log.info("%s: device %s signed by its cross-signing key", self.user_id, self.device_id)

    async def _keys_housekeeping(self) -> None:
        client = self.nio
        if client.should_upload_keys:
            await self._publish_keys(tries=HOUSEKEEPING_TRIES)
        if client.should_query_keys:
            await self.query_keys()
        if client.should_claim_keys:
            users = client.get_users_for_key_claiming()
            await client.keys_claim(users)
        if client.outgoing_to_device_messages:
            await client.send_to_device_messages()

    async def query_keys(self) -> None:
        async with self._query_lock:
            if self.nio.should_query_keys:
                response = await self.nio.keys_query()
                if not isinstance(response, nio.KeysQueryResponse):
                    raise MatrixError(f"{self.user_id}: key query failed: {response}", None)

    # ---- /sync ----------------------------------------------------------------------------------

    async def _sync_once(self, full_state: bool = False, timeout: int = 0) -> None:
        response = await self.nio.sync(
            timeout=timeout,
            sync_filter=SYNC_FILTER,
            since=self.state.get("sync_token") or None,
            full_state=full_state or None,
        )
        if not isinstance(response, nio.SyncResponse):
            raise MatrixError(f"{self.user_id}: sync failed: {response}", None)
        for event in response.to_device_events:
            if isinstance(event, nio.RoomKeyRequest):
                try:
                    await self._answer_key_request(event)
                except Exception as exc:
                    log.warning("%s: a key request of %s not answered: %s", self.user_id, event.sender, exc)
        # every to-device message of this sync is handled and its keys are stored: only now
        # does the next sync start after it
        self.state["sync_token"] = response.next_batch
        self._save()
        async with self._synced:
            self._syncs += 1
            self._synced.notify_all()

    async def _sync_forever(self) -> None:
        delay = 0.5
        while True:
            try:
                await self._keys_housekeeping()
                await self._sync_once(timeout=SYNC_TIMEOUT_MS)
                delay = 0.5
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s: sync: %s; again in %.1f s", self.user_id, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)

    # ---- crypto traffic of a transaction (a device without /sync: the bot) ----------------------

    async def receive_traffic(
        self,
        to_device: list[dict],
        one_time_keys: dict[str, int] | None = None,
        fallback_keys: list[str] | None = None,
        changed: list[str] = (),
        left: list[str] = (),
    ) -> None:
        """This device's share of an appservice transaction's crypto traffic (MSC2409 to-device
        messages, MSC3202 key counts and device lists), handled as a /sync response would be:
        its room keys are in the crypto store when this returns. A failure to handle it raises
        (the transaction is refused and comes again); a key upload that fails is tried again
        with the next transaction's counts."""
        body: dict[str, Any] = {
            "next_batch": f"as-{uuid.uuid4().hex}",  # nio skips a response whose token it had
            "to_device": {
                "events": [{k: v for k, v in m.items() if k not in ("to_user_id", "to_device_id")} for m in to_device]
            },
            "device_lists": {"changed": list(changed), "left": list(left)},
        }
        if one_time_keys:
            body["device_one_time_keys_count"] = one_time_keys
        if fallback_keys is not None:  # nio makes no fallback keys: kept for what it may read
            body["device_unused_fallback_key_types"] = fallback_keys
        response = nio.SyncResponse.from_dict(body)
        if not isinstance(response, nio.SyncResponse):
            log.warning("%s: crypto traffic not understood (%s): skipped", self.user_id, response)
            return
        try:
            await self.nio.receive_response(response)
        except Exception as exc:  # the crypto store could not keep it: the homeserver sends it again
            raise MatrixError(f"{self.user_id}: crypto traffic not kept: {exc}", None) from exc
        count = (one_time_keys or {}).get("signed_curve25519")
        if isinstance(count, int):  # nio reads a count of 0 as none
            self.nio.olm.uploaded_key_count = count
        for event in response.to_device_events:
            if isinstance(event, nio.RoomKeyRequest):
                try:
                    await self._answer_key_request(event)
                except Exception as exc:
                    log.warning("%s: a key request of %s not answered: %s", self.user_id, event.sender, exc)
        try:
            if self.nio.should_upload_keys:
                response = await self.nio.keys_upload()
                if not isinstance(response, nio.KeysUploadResponse):
                    log.warning(
                        "%s: one-time keys not uploaded (%s): again with the next counts", self.user_id, response
                    )
            if self.nio.outgoing_to_device_messages:
                await self.nio.send_to_device_messages()
        except Exception as exc:
            log.warning("%s: key housekeeping after crypto traffic: %s", self.user_id, exc)

    async def room(self, room_id: str, timeout: float) -> nio.MatrixRoom | None:
        """The room as this device's /sync knows it, once it does (None after `timeout`)."""
        if not self.syncs:
            return await self._read_room(room_id)
        deadline = time.monotonic() + timeout
        async with self._synced:
            while room_id not in self.nio.rooms:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._synced.wait(), remaining)
                except TimeoutError:
                    return None
        return self.nio.rooms[room_id]

    async def _read_room(self, room_id: str) -> nio.MatrixRoom | None:
        """A device without /sync: the room's members and encryption, read now; their devices
        are queried again each time (a new device of a member is seen without device lists)."""
        status, body = await self._raw("GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/members")
        if status != 200:
            return None
        settings = await self.settings_of(room_id)
        room = nio.MatrixRoom(room_id, self.user_id, encrypted=bool(settings.get("algorithm")))
        for event in body.get("chunk") or []:
            membership = (event.get("content") or {}).get("membership")
            if event.get("state_key") and membership in ("join", "invite"):
                room.add_member(event["state_key"], None, None, invited=membership == "invite")
        self.nio.rooms[room_id] = room
        self.nio.olm.users_for_key_query.update(room.users)
        return room

    def encrypted(self, room_id: str) -> bool:
        room = self.nio.rooms.get(room_id) if self.nio else None
        return bool(room is not None and room.encrypted) or (
            self.nio is not None and room_id in self.nio.encrypted_rooms
        )

    # ---- room keys in ---------------------------------------------------------------------------

    async def _room_key(self, event) -> None:
        room_id, session_id = getattr(event, "room_id", None), getattr(event, "session_id", None)
        if isinstance(room_id, str) and isinstance(session_id, str):
            self.on_room_key(self, room_id, session_id)

    def has_key(self, room_id: str, sender_key: str, session_id: str) -> bool:
        return self.nio.olm.inbound_group_store.get(room_id, sender_key, session_id) is not None

    def decrypt(self, event: dict) -> dict | None:
        """The plain event of an m.room.encrypted `event`, or None without its room key.
        ValueError if it cannot be decrypted with the key (or is a replay)."""
        content, room_id = event["content"], event["room_id"]
        session = self.nio.olm.inbound_group_store.get(
            room_id, content.get("sender_key", ""), content.get("session_id", "")
        )
        if session is None:
            return None
        import vodozemac

        try:
            plaintext, index = session.decrypt(content["ciphertext"])
        except (vodozemac.MegolmDecryptionException, vodozemac.DecodeException, KeyError) as exc:
            raise ValueError(f"cannot decrypt {event.get('event_id')}: {exc}") from exc
        seen = self._indices.setdefault((content["session_id"], index), event.get("event_id", ""))
        if seen != event.get("event_id", ""):
            raise ValueError(f"{event.get('event_id')} replays message {index} of its session")
        payload = json.loads(plaintext)
        if (
            not isinstance(payload, dict)
            or payload.get("room_id") != room_id
            or not isinstance(payload.get("type"), str)
            or not isinstance(payload.get("content"), dict)
        ):
            raise ValueError(f"{event.get('event_id')}: the decrypted payload is not for this room")
        inner = dict(payload["content"])
        relates = content.get("m.relates_to")
        if isinstance(relates, dict) and "m.relates_to" not in inner:
            inner["m.relates_to"] = relates  # the relation travels in the clear (spec)
        plain = {k: v for k, v in event.items() if k != "content"}
        plain.update(type=payload["type"], content=inner)
        return plain

    async def request_key(self, event: dict) -> None:
        """Ask the sender's device (and this identity's own devices) for an event's room key.
        The request is registered with nio (`outgoing_key_requests`, kept in its crypto store,
        by session id as nio keeps its own): nio drops a forwarded key nobody asked for."""
        content = event["content"]
        session_id = str(content.get("session_id") or "")
        olm = self.nio.olm
        if session_id not in olm.outgoing_key_requests:
            request = OutgoingKeyRequest(session_id, session_id, event["room_id"], MEGOLM)
            olm.outgoing_key_requests[session_id] = request
            olm.store.add_outgoing_key_request(request)
        body = {
            "action": "request",
            "requesting_device_id": self.device_id,
            "request_id": session_id,  # nio's convention: its cancellation says the same
            "body": {
                "algorithm": MEGOLM,
                "room_id": event["room_id"],
                "sender_key": content.get("sender_key"),
                "session_id": session_id,
            },
        }
        device = content.get("device_id") or "*"
        status, answer = await self._raw(
            "PUT",
            f"/_matrix/client/v3/sendToDevice/m.room_key_request/{uuid.uuid4().hex}",
            {"messages": {event["sender"]: {device: body}}},
        )
        if status != 200:
            raise MatrixError(f"{self.user_id}: key request refused: {status} {answer}", status)

    # ---- room keys out, and encrypting ----------------------------------------------------------

    async def settings_of(self, room_id: str) -> dict:
        if room_id not in self.settings or not self.syncs:
            status, body = await self._raw("GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/state/m.room.encryption/")
            self.settings[room_id] = body if status == 200 else {}
        return self.settings[room_id]

    async def encryption_state(self, room_id: str) -> dict | None:
        """The room's m.room.encryption state as the homeserver has it now ({} when it has none),
        or None when this identity cannot read the room's state. Not cached."""
        status, body = await self._raw("GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/state/m.room.encryption/")
        if status == 200:
            return body if isinstance(body, dict) else {}
        return {} if status == 404 else None

    def forget_settings(self, room_id: str) -> None:
        self.settings.pop(room_id, None)
        self.outbound.pop(room_id, None)  # new settings: a new room key

    async def encrypt(self, room_id: str, event_type: str, content: dict) -> dict:
        """The m.room.encrypted content of an event, its room key shared first with every
        device of the room's members that lacks it."""
        lock = self._room_locks.setdefault(room_id, asyncio.Lock())
        async with lock:
            room = await self.room(room_id, 30.0)
            if room is None:
                raise MatrixError(f"{self.user_id}: {room_id} is not known to its device yet", None)
            if self.nio.should_query_keys:
                await self.query_keys()
            members = set(room.users) | set(room.invited_users)
            outbound = self.outbound.get(room_id)
            if outbound is None or outbound.expired or (outbound.members - members):
                settings = await self.settings_of(room_id)
                ms = settings.get("rotation_period_ms")
                msgs = settings.get("rotation_period_msgs")
                outbound = Outbound(
                    members,
                    ms if isinstance(ms, int) and ms > 0 else DEFAULT_ROTATION_MS,
                    msgs if isinstance(msgs, int) and msgs > 0 else DEFAULT_ROTATION_MSGS,
                )
                self.outbound[room_id] = outbound
                keys = self.nio.olm.account.identity_keys
                self.nio.olm.create_group_session(
                    keys["curve25519"], keys["ed25519"], room_id, outbound.session.id, outbound.session.session_key
                )
                own = self.state.setdefault("own_sessions", {})
                own[outbound.session.id] = {"room_id": room_id, "key": outbound.session.session_key}
                for old in list(own)[:-OWN_SESSIONS_KEPT]:
                    del own[old]
                self._save()
                log.info("%s: new room key for %s", self.user_id, room_id)
            outbound.members |= members
            await self._share(room_id, outbound, members)
            payload = {"type": event_type, "content": content, "room_id": room_id}
            ciphertext = outbound.session.encrypt(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
            encrypted = {
                "algorithm": MEGOLM,
                "sender_key": self.nio.olm.account.identity_keys["curve25519"],
                "ciphertext": ciphertext,
                "session_id": outbound.session.id,
                "device_id": self.device_id,
            }
            relates = content.get("m.relates_to")
            if isinstance(relates, dict):
                encrypted["m.relates_to"] = relates
            return encrypted

    async def _answer_key_request(self, request: nio.RoomKeyRequest) -> None:
        """An owner's device asks for a room key this device made, in a room the owner is in:
        the key is sent again to that device (as the m.room_key it first was, from the index
        it began at). Anyone else, another room, or a key not this device's: no answer."""
        olm = self.nio.olm
        room = self.nio.rooms.get(request.room_id)
        if not self.syncs and isinstance(request.room_id, str):  # no /sync: its members now
            room = await self._read_room(request.room_id)
        own = (self.state.get("own_sessions") or {}).get(request.session_id)
        if (
            not self.may_request(request.sender)
            or room is None
            or request.sender not in room.users
            or request.sender in room.invited_users
            or own is None
            or own.get("room_id") != request.room_id
            or request.sender_key != olm.account.identity_keys["curve25519"]
        ):
            log.info(
                "%s: key request of %s for %s not answered (not theirs to ask)",
                self.user_id,
                request.sender,
                request.room_id,
            )
            return
        device = olm.device_store[request.sender].get(request.requesting_device_id)
        if device is None:
            olm.users_for_key_query.add(request.sender)
            await self.query_keys()
            device = olm.device_store[request.sender].get(request.requesting_device_id)
        if device is None:
            return
        if olm.session_store.get(device.curve25519) is None:
            await self.nio.keys_claim({request.sender: [device.id]})
        session = olm.session_store.get(device.curve25519)
        if session is None:
            raise MatrixError(f"no Olm session with {request.sender}'s device {device.id}", None)
        content = {
            "algorithm": MEGOLM,
            "room_id": request.room_id,
            "session_id": request.session_id,
            "session_key": own["key"],
        }
        message = olm._olm_encrypt(session, device, "m.room_key", content)
        status, body = await self._raw(
            "PUT",
            f"/_matrix/client/v3/sendToDevice/m.room.encrypted/{uuid.uuid4().hex}",
            {"messages": {request.sender: {device.id: message}}},
        )
        if status != 200:
            raise MatrixError(f"{status} {body.get('error', body)}", status)
        log.info(
            "%s: room key of %s given again to %s's device %s", self.user_id, request.room_id, request.sender, device.id
        )

    async def _share(self, room_id: str, outbound: Outbound, members: set[str]) -> None:
        olm = self.nio.olm
        need = [
            (user_id, device)
            for user_id in sorted(members)
            for device in olm.device_store.active_user_devices(user_id)
            if not (user_id == self.user_id and device.id == self.device_id)
            and (user_id, device.id) not in outbound.shared_with
        ]
        if not need:
            return
        missing: dict[str, list[str]] = {}
        for user_id, device in need:
            if olm.session_store.get(device.curve25519) is None:
                missing.setdefault(user_id, []).append(device.id)
        if missing:
            delay = 0.5
            for _attempt in range(5):
                response = await self.nio.keys_claim(missing)
                if isinstance(response, nio.KeysClaimResponse):
                    break
                log.warning("%s: key claim failed (%s); again in %.1f s", self.user_id, response, delay)
                await asyncio.sleep(delay)
                delay *= 2
        key_content = {
            "algorithm": MEGOLM,
            "room_id": room_id,
            "session_id": outbound.session.id,
            "session_key": outbound.session.session_key,
        }
        messages: dict[str, dict[str, Any]] = {}
        sent: set[tuple[str, str]] = set()
        for user_id, device in need:
            session = olm.session_store.get(device.curve25519)
            if session is None:
                log.warning(
                    "%s: no Olm session with %s's device %s: it gets no room key", self.user_id, user_id, device.id
                )
                continue
            messages.setdefault(user_id, {})[device.id] = olm._olm_encrypt(session, device, "m.room_key", key_content)
            sent.add((user_id, device.id))
        if not messages:
            return
        status, body = await self._raw(
            "PUT", f"/_matrix/client/v3/sendToDevice/m.room.encrypted/{uuid.uuid4().hex}", {"messages": messages}
        )
        if status != 200:
            raise MatrixError(
                f"{self.user_id}: sharing the room key of {room_id}: {status} {body.get('error', body)}", status
            )
        outbound.shared_with |= sent
