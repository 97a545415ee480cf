"""Intents: the only way an event leaves the bridge (mautrix's word). One per Matrix identity —
each puppet and the bridge bot — made by `Puppet`.

Every room event goes out through `Intent.send` (`edit` and `react` build on it), and on the way:
- it carries a transaction id, the caller's or a new one: the homeserver keeps one event per id,
  so a request retried after a timeout or a restart (nio's backoff, recovery) never posts twice;
- an `m.room.message` declares its mentions (`m.mentions`, also inside `m.new_content` of an
  edit): `{}` unless the caller put the intended ones in the content, so agent text that says
  "@room" or the owner's name triggers no push rule (docs/architecture.md "The Matrix side");
- `Outgoing.prepare(user_id, room_id, event_type, content)` sees it last and may change its type
  and content: the one place where a room's events are transformed (encryption plugs in here:
  `m.room.encrypted`, with `m.relates_to` left in the clear). The default sends as is.
- it is measured as it will be sent, after `prepare` (encryption makes an event about a third
  larger): an event over MAX_EVENT_BYTES is made smaller — an edit's fallback body shortened,
  then a message's HTML dropped, each prepared (encrypted) and measured again — and what still
  does not fit raises EventTooLarge, before anything reaches the homeserver. This is the one
  place every outgoing event is measured (answers split their text to fit: channels/base/stream.py).
State events, redactions, typing, receipts and membership are never transformed (the spec
keeps them in the clear). `request` is the escape hatch for reads the Intent has no method for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any
from urllib.parse import quote

import aiohttp

from .client import AppserviceClient, MatrixError, TooLarge, check

log = logging.getLogger(__name__)

RECEIPT_DELAY = 0.2  # seconds a read receipt waits for a newer one in the same room
# an event is at most 64 KiB as the homeserver stores it (its content, plus ~2 KiB of envelope:
# ids, hashes, signatures); a room event's content as sent is kept below this
MAX_EVENT_BYTES = 60_000
FALLBACK_CHARS = 1_000  # an edit too big keeps this much of its fallback body (clients without edits)
TYPING_TIMEOUT_MS = 30_000


def _q(value: str) -> str:
    return quote(value, safe="")


JOIN_RETRIES = (0.5, 1.0, 2.0, 4.0)  # seconds between attempts to join a room


class EventTooLarge(MatrixError):
    """A room event that does not fit in an event as sent, even without its HTML; nothing was
    sent. `size` is its size in bytes, as it would have gone out."""

    def __init__(self, event_type: str, size: int):
        super().__init__(
            f"a {event_type} event of {size:,} bytes as sent is over the {MAX_EVENT_BYTES:,}-byte limit", 413
        )
        self.size = size


def weight(text: str) -> int:
    """What `text` weighs inside an event's JSON (escaped as nio sends it: \\uXXXX for every
    non-ASCII character), which is never less than it weighs when the homeserver stores it."""
    return len(json.dumps(text)) - 2


def new_txn_id() -> str:
    return uuid.uuid4().hex


class Outgoing:
    """What a room's events look like when they leave: this one sends them unchanged. A
    subclass (encryption) may return another event type and content for some rooms."""

    async def prepare(self, user_id: str, room_id: str, event_type: str, content: dict) -> tuple[str, dict]:
        return event_type, content

    async def encrypts(self, user_id: str, room_id: str) -> bool:
        """Whether `prepare` encrypts `user_id`'s events in `room_id`: media sent there is then
        uploaded encrypted and referenced by an EncryptedFile (`file`), not by `url`."""
        return False

    def new_room(self, user_id: str, body: dict) -> dict:
        """The /createRoom body of a room this bridge makes: encryption adds its state."""
        return body


PLAIN = Outgoing()


def declare_mentions(content: dict) -> dict:
    """`content` with `m.mentions` set (the caller's, when it is an object; else `{}`), also in
    the `m.new_content` of an edit. Not changed in place."""
    out = dict(content)
    mentions = out.get("m.mentions")
    out["m.mentions"] = mentions if isinstance(mentions, dict) else {}
    new = out.get("m.new_content")
    if isinstance(new, dict):
        inner = new.get("m.mentions")
        out["m.new_content"] = {**new, "m.mentions": inner if isinstance(inner, dict) else {}}
    return out


def _size(content: dict) -> int:
    return len(json.dumps(content, separators=(",", ":")).encode("utf-8"))  # as nio sends it


def edit_content(original_event_id: str, new: dict) -> dict:
    """The `m.replace` event replacing `original_event_id` with `new`: `m.new_content` carries
    the new message and its mentions; the outer body is the fallback for clients without edits,
    and the outer `m.mentions` is `{}` (an edit never notifies anyone anew). Its size is
    checked where it is sent (`Intent.send`, after encryption)."""
    new = declare_mentions(new)
    msgtype = new.get("msgtype", "m.text")
    body = str(new.get("body", ""))
    return {
        "msgtype": msgtype,
        "body": "* " + body,
        "m.new_content": new,
        "m.mentions": {},
        "m.relates_to": {"rel_type": "m.replace", "event_id": original_event_id},
    }


def _without_html(content: dict) -> dict:
    return {k: v for k, v in content.items() if k not in ("format", "formatted_body")}


def smaller_versions(event_type: str, content: dict):
    """`content`, then smaller forms of it that say the same to a person, smallest last: an
    edit with its fallback body cut to FALLBACK_CHARS (clients that know edits never show it),
    then the message without its HTML (the text stays whole). Only messages have smaller forms."""
    yield content
    if event_type != "m.room.message":
        return
    new = content.get("m.new_content")
    if isinstance(new, dict):
        body = str(content.get("body", ""))
        if len(body) > FALLBACK_CHARS:
            content = {**_without_html(content), "body": body[:FALLBACK_CHARS] + "…"}
            yield content
        if "formatted_body" in new or "formatted_body" in content:
            yield {**_without_html(content), "m.new_content": _without_html(new)}
    elif "formatted_body" in content:
        yield _without_html(content)


class Intent:
    """Acting as `user_id` in rooms: sending, editing, reacting, redacting, state, media,
    typing, receipts, membership and profile, through the masquerading nio client."""

    def __init__(self, client: AppserviceClient, outgoing: Outgoing | None = None):
        self.client = client
        self.user_id = client.user_id
        self.outgoing = outgoing or PLAIN
        # room → the newest event to mark read once the receipt in flight there has landed
        self._receipts: dict[str, str | None] = {}

    # ---- room events ------------------------------------------------------------------------

    async def send(
        self, room_id: str, content: dict, *, event_type: str = "m.room.message", txn_id: str | None = None
    ) -> str:
        """Send a room event; its event id. MatrixError when the homeserver refuses it."""
        if event_type == "m.room.message":
            content = declare_mentions(content)
        sent_type, sent = await self._fitting(room_id, event_type, content)
        response = await self.client.put_event(room_id, sent_type, sent, txn_id or new_txn_id())
        return check(response, f"sending {sent_type} as {self.user_id}").event_id

    async def _fitting(self, room_id: str, event_type: str, content: dict) -> tuple[str, dict]:
        """The event as it will be sent (prepared: encrypted where the room is), in the first of
        its forms (smaller_versions) that fits MAX_EVENT_BYTES once prepared. EventTooLarge if
        none does. A form whose plain size alone is over the limit is not prepared at all."""
        size = 0
        for version in smaller_versions(event_type, content):
            if _size(version) > MAX_EVENT_BYTES:
                size = _size(version)
                continue
            sent_type, sent = await self.outgoing.prepare(self.user_id, room_id, event_type, version)
            size = _size(sent)
            if size <= MAX_EVENT_BYTES:
                if version is not content:
                    log.info(
                        "%s: a %s in %s made smaller to fit an event (%s bytes as sent)",
                        self.user_id,
                        event_type,
                        room_id,
                        f"{size:,}",
                    )
                return sent_type, sent
        raise EventTooLarge(event_type, size)

    async def edit(self, room_id: str, event_id: str, new_content: dict, *, txn_id: str | None = None) -> str:
        """Replace message `event_id` by `new_content` (`m.replace`); the edit's event id."""
        return await self.send(room_id, edit_content(event_id, new_content), txn_id=txn_id)

    async def react(self, room_id: str, event_id: str, key: str, *, txn_id: str | None = None) -> str:
        return await self.send(
            room_id,
            {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}},
            event_type="m.reaction",
            txn_id=txn_id,
        )

    async def redact(self, room_id: str, event_id: str, reason: str | None = None, *, txn_id: str | None = None) -> str:
        response = await self.client.redact_event(room_id, event_id, reason, txn_id or new_txn_id())
        return check(response, f"redacting {event_id} as {self.user_id}").event_id

    async def send_state(self, room_id: str, event_type: str, state_key: str, content: dict) -> str:
        response = await self.client.put_state(room_id, event_type, state_key, content)
        return check(response, f"{event_type} in {room_id} as {self.user_id}").event_id

    async def upload(self, data: bytes, content_type: str, filename: str) -> str:
        """Upload media; its mxc:// URI."""
        response = await self.client.upload_bytes(data, content_type, filename)
        return check(response, f"uploading {filename} as {self.user_id}").content_uri

    async def encrypts(self, room_id: str) -> bool:
        """Whether this identity's events in `room_id` leave encrypted (see Outgoing)."""
        return await self.outgoing.encrypts(self.user_id, room_id)

    async def download(self, mxc: str, limit: int) -> bytes:
        """The bytes of `mxc://server/id`, through the authenticated media API (Matrix 1.11);
        the legacy endpoint only when the homeserver has no v1 (404 M_UNRECOGNIZED, 405).
        TooLarge past `limit` bytes (the body is read no further); MatrixError when refused."""
        server, _, media_id = mxc.removeprefix("mxc://").partition("/")
        if not mxc.startswith("mxc://") or not server or not media_id or "/" in media_id:
            raise MatrixError(f"not a media URI: {mxc!r}")
        where = f"{_q(server)}/{_q(media_id)}"
        for path in (f"/_matrix/client/v1/media/download/{where}", f"/_matrix/media/v3/download/{where}"):
            status, data, error = await self.client.download_bytes(path, limit)
            if status == 200:
                return data
            if (
                status in (404, 405)
                and error.get("errcode", "M_UNRECOGNIZED") == "M_UNRECOGNIZED"
                and path.startswith("/_matrix/client/v1/")
            ):
                continue  # a homeserver older than authenticated media
            if status == 413:
                raise TooLarge(mxc)
            raise MatrixError(
                f"downloading {mxc}: {status} {error.get('errcode', '')} {error.get('error', '')}".strip()
            )
        raise MatrixError(f"downloading {mxc}: the homeserver has no media download")

    # ---- courtesy: typing and receipts ------------------------------------------------------

    async def typing(self, room_id: str, on: bool) -> None:
        body = {"typing": True, "timeout": TYPING_TIMEOUT_MS} if on else {"typing": False}
        try:
            await self.client.raw("PUT", f"/_matrix/client/v3/rooms/{_q(room_id)}/typing/{_q(self.user_id)}", body)
        except aiohttp.ClientError:
            pass  # typing is a courtesy; never fail a turn over it

    async def read_up_to(self, room_id: str, event_id: str) -> None:
        """Mark the room read up to `event_id`, RECEIPT_DELAY from now. Meanwhile (and while a
        receipt is in flight) later calls for the room only move the mark: the newest goes out,
        so a run of quick turns costs the homeserver a receipt or two, not one per message."""
        if room_id in self._receipts:
            self._receipts[room_id] = event_id
            return
        self._receipts[room_id] = event_id
        try:
            while True:
                await asyncio.sleep(RECEIPT_DELAY)
                event_id, self._receipts[room_id] = self._receipts[room_id], None
                if event_id is None:
                    return
                await self._send_receipt(room_id, event_id)
        finally:
            del self._receipts[room_id]

    async def _send_receipt(self, room_id: str, event_id: str) -> None:
        path = f"/_matrix/client/v3/rooms/{_q(room_id)}/receipt/m.read/{_q(event_id)}"
        try:
            status, body = await self.client.raw("POST", path, {})
            if status != 200:
                log.info("%s: read receipt refused: %s %s", self.user_id, status, body.get("error", body))
        except aiohttp.ClientError:
            pass

    async def set_presence(self, presence: str, status_msg: str | None = None) -> None:
        """online / unavailable / offline, with a status message (None clears it)."""
        body: dict[str, Any] = {"presence": presence}
        if status_msg is not None:
            body["status_msg"] = status_msg
        status, answer = await self.client.raw("PUT", f"/_matrix/client/v3/presence/{_q(self.user_id)}/status", body)
        if status != 200:
            log.info("%s: presence refused: %s %s", self.user_id, status, answer.get("error", answer))

    async def presence(self) -> str | None:
        """The presence the homeserver shows for this user (offline when it has presence off)."""
        status, answer = await self.client.raw("GET", f"/_matrix/client/v3/presence/{_q(self.user_id)}/status")
        value = answer.get("presence") if status == 200 else None
        return value if isinstance(value, str) else None

    # ---- membership and rooms ---------------------------------------------------------------

    async def join(self, room_id: str) -> bool:
        """Join; False if the homeserver refuses (4xx). A busy or broken homeserver (5xx, 429,
        no answer) is asked again with backoff (JOIN_RETRIES); then MatrixError (transient), so
        that the event that asked for the join is sent again rather than counted as handled."""
        for pause in (*JOIN_RETRIES, None):
            try:
                status, body = await self.client.raw("POST", f"/_matrix/client/v3/join/{_q(room_id)}", {})
            except (TimeoutError, aiohttp.ClientError) as exc:
                status, body = None, {"error": str(exc) or type(exc).__name__}
            if status == 200:
                return True
            error = MatrixError(f"{self.user_id} could not join {room_id}: {body.get('error', status)}", status)
            if not error.transient:
                log.warning("%s", error)
                return False
            if pause is None:
                raise error
            log.info("%s; trying again in %.1f s", error, pause)
            await asyncio.sleep(pause)
        return False

    async def leave(self, room_id: str) -> None:
        await self.client.raw("POST", f"/_matrix/client/v3/rooms/{_q(room_id)}/leave", {})

    async def invite(self, room_id: str, user_id: str) -> bool:
        status, body = await self.client.raw(
            "POST", f"/_matrix/client/v3/rooms/{_q(room_id)}/invite", {"user_id": user_id}
        )
        if status != 200:
            log.info("%s could not invite %s to %s: %s", self.user_id, user_id, room_id, body.get("error", status))
        return status == 200

    async def create_room(self, body: dict[str, Any]) -> str:
        """POST /createRoom; the new room id, or MatrixError with the server's words."""
        body = self.outgoing.new_room(self.user_id, body)
        status, answer = await self.client.raw("POST", "/_matrix/client/v3/createRoom", body)
        room_id = answer.get("room_id")
        if status != 200 or not isinstance(room_id, str):
            raise MatrixError(f"creating a room: {status} {answer.get('error', answer)}", status)
        return room_id

    # ---- the account ------------------------------------------------------------------------

    async def register(self) -> None:
        """Register the user (`m.login.application_service`, no device); in use is fine."""
        status, body = await self.client.raw(
            "POST",
            "/_matrix/client/v3/register",
            {
                "type": "m.login.application_service",
                "username": self.user_id[1:].split(":", 1)[0],
                "inhibit_login": True,
            },
            masquerade=False,
        )
        if status != 200 and body.get("errcode") != "M_USER_IN_USE":
            raise MatrixError(f"registering {self.user_id}: {status} {body.get('error', body)}", status)

    async def displayname(self) -> str | None:
        status, body = await self.client.raw("GET", f"/_matrix/client/v3/profile/{_q(self.user_id)}/displayname")
        name = body.get("displayname") if status == 200 else None
        return name if isinstance(name, str) else None

    async def set_displayname(self, name: str) -> None:
        status, body = await self.client.raw(
            "PUT", f"/_matrix/client/v3/profile/{_q(self.user_id)}/displayname", {"displayname": name}
        )
        if status != 200:
            raise MatrixError(f"naming {self.user_id}: {status} {body.get('error', body)}", status)

    async def avatar_url(self) -> str | None:
        status, body = await self.client.raw("GET", f"/_matrix/client/v3/profile/{_q(self.user_id)}/avatar_url")
        url = body.get("avatar_url") if status == 200 else None
        return url if isinstance(url, str) and url else None

    async def set_avatar_url(self, url: str) -> None:
        status, body = await self.client.raw(
            "PUT", f"/_matrix/client/v3/profile/{_q(self.user_id)}/avatar_url", {"avatar_url": url}
        )
        if status != 200:
            raise MatrixError(f"setting the avatar of {self.user_id}: {status} {body.get('error', body)}", status)

    async def ping(self, appservice_id: str, transaction_id: str) -> tuple[int, dict]:
        """POST /appservice/{id}/ping (Matrix 1.7): the homeserver calls the appservice now."""
        return await self.client.raw(
            "POST",
            f"/_matrix/client/v1/appservice/{_q(appservice_id)}/ping",
            {"transaction_id": transaction_id},
            masquerade=False,
        )

    # ---- reads --------------------------------------------------------------------------------

    async def request(self, method: str, path: str, body: Any = None, *, masquerade: bool = True) -> tuple[int, dict]:
        """A request the Intent has no method for (reads: messages, relations, state). Returns
        (status, json body). Never use it to send an event: that is what send() is for."""
        return await self.client.raw(method, path, body, masquerade=masquerade)

    async def has_devices(self, user_ids: list[str]) -> bool:
        """Whether every one of `user_ids` has a device with keys (POST /keys/query, a read):
        someone who has not logged in anywhere yet cannot read what is encrypted for them now."""
        status, body = await self.client.raw(
            "POST", "/_matrix/client/v3/keys/query", {"device_keys": {user: [] for user in user_ids}}
        )
        found = body.get("device_keys") if status == 200 and isinstance(body, dict) else None
        return isinstance(found, dict) and all(found.get(user) for user in user_ids)


RELATED_TYPES = ("m.room.message", "m.sticker")  # the events that take a relation of their own


class InRelation:
    """An Intent whose new messages in one room carry one relation — a thread's
    (channels/base/conversations.py): made for one turn, so that everything it sends goes into its
    thread without every function being told. Messages that relate to something already (an
    edit's `m.replace`, whose `m.new_content` has no relation: an edit stays in its original's
    thread; a reaction) and events in other rooms go as they are; every other call is the
    Intent's."""

    def __init__(self, intent: Intent, room_id: str, relates_to: dict):
        self.intent = intent
        self.room_id = room_id
        self.relates_to = relates_to

    def __getattr__(self, name: str) -> Any:
        return getattr(self.intent, name)

    async def send(
        self, room_id: str, content: dict, *, event_type: str = "m.room.message", txn_id: str | None = None
    ) -> str:
        if room_id == self.room_id and event_type in RELATED_TYPES and "m.relates_to" not in content:
            content = {**content, "m.relates_to": dict(self.relates_to)}
        return await self.intent.send(room_id, content, event_type=event_type, txn_id=txn_id)


class AfterSent:
    """An Intent whose new events in one room wait until `first` — another send, already under
    way — is done (sent or failed): made for one turn whose prompt the room shows by an event
    still being sent (a prompt from an attached ACP client, quoted by a notice:
    bridge/attach/service.py), so that nothing of its answer comes before that event, while the
    agent is asked at once. Every other call is the Intent's."""

    def __init__(self, intent: Any, room_id: str, first: asyncio.Future):
        self.intent = intent
        self.room_id = room_id
        self.first = first

    def __getattr__(self, name: str) -> Any:
        return getattr(self.intent, name)

    async def send(
        self, room_id: str, content: dict, *, event_type: str = "m.room.message", txn_id: str | None = None
    ) -> str:
        if room_id == self.room_id and not self.first.done():
            await asyncio.wait({self.first})
        return await self.intent.send(room_id, content, event_type=event_type, txn_id=txn_id)
