"""Attachments both ways, and what each kind of owner message is to an agent
(docs/architecture.md "Streaming, permissions and cancel").

In (pure):
- `read_message(event_type, content)` — what an owner's message says to the agents: a text (the
  prompt; routing and mentions read it), what the store keeps for other agents' context, an
  attachment to fetch, or why it is not passed on. The table of kinds is in docs/using.md
  "What each message kind does".
  What an attachment becomes in an agent's prompt is channels/turns/prompt.py.

Out (pure): `outgoing_part(block)` — an agent's image, audio or resource block as media to post
(`m.image` / `m.audio` / `m.file`); a link as text.

Transfer (I/O, through the identity's Intent): `fetch(intent, attachment, limit)` downloads
(authenticated media API, the legacy one only when the homeserver lacks it; never more than
`limit` bytes) and decrypts an encrypted attachment (`file`: AES-CTR-256, SHA-256 checked);
`post(intent, room_id, media)` uploads — encrypted when the room's `Outgoing` encrypts — and
sends the media event.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import mimetypes
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

from nio.crypto.attachments import decrypt_attachment, encrypt_attachment
from nio.exceptions import EncryptionError

from .client import TooLarge

if TYPE_CHECKING:
    from .intent import Intent

log = logging.getLogger(__name__)

ATTACHMENT_TYPES = {"m.image": "image", "m.audio": "audio", "m.video": "video", "m.file": "file"}
POLL_TYPES = ("m.poll.start", "org.matrix.msc3381.poll.start")
STICKER = "m.sticker"
# message kinds that say nothing to an agent, and are not answered
# (docs/using.md "What each message kind does")
SILENT_MSGTYPES = ("m.notice", "m.key.verification.request", "m.server_notice")
DOWNLOAD_CHUNK = 64 * 1024


class FileGate(Protocol):
    """Where the bytes of a local file an agent names come from (channels/turns/agent_files.py)."""

    async def read(self, path: Path, limit: int) -> bytes:
        """The file's bytes, at most `limit`; MediaError with the reason it is refused."""


class MediaError(Exception):
    """An attachment could not be passed on; the message is the one line the owner sees."""


def mib(size: int) -> str:
    """A size for people: 3.0 MiB, 20 KiB, 512 bytes."""
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.0f} KiB"
    return f"{size} bytes"


# ---- in: what an owner's message is ----------------------------------------------------------


@dataclass
class Attachment:
    """A file the owner sent: where it is (plain `url`, or an encrypted `file`) and what it is."""

    kind: str  # image | audio | video | file (a sticker is an image)
    name: str  # the file name
    mimetype: str
    size: int | None = None  # as the message declares it (checked again while downloading)
    url: str | None = None  # mxc:// of plain media
    file: dict | None = None  # the EncryptedFile of encrypted media (url, key, iv, hashes, v)
    label: str = ""  # how the store names it: image, audio, video, file, sticker
    data: bytes | None = field(default=None, repr=False)  # once fetched: shared by the turns

    @property
    def mxc(self) -> str | None:
        return self.url if self.url else (self.file or {}).get("url")

    @property
    def tag(self) -> str:
        return f"[{self.label or self.kind}: {self.name}]"

    @property
    def called(self) -> str:
        """How a line names it: its file name, or a sticker by its description."""
        return f"the sticker “{self.name}”" if self.label == "sticker" else self.name


@dataclass(frozen=True)
class OwnerMessage:
    """What one owner message says to the agents."""

    text: str = ""  # the prompt text: routing and mentions read it
    stored: str = ""  # the store's text (other agents' context lines)
    formatted: str | None = None  # the HTML of `text`, when it has some
    attachment: Attachment | None = None
    note: str | None = None  # not passed on: this line says so in the room
    silent: bool = False  # not passed on, and nothing said (notices)
    plain: bool = False  # typed text: may be a `!` command or a numbered answer

    @property
    def passed_on(self) -> bool:
        return not self.silent and self.note is None and bool(self.text.strip() or self.attachment)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _html(content: dict) -> str | None:
    formatted = content.get("formatted_body")
    if content.get("format") == "org.matrix.custom.html" and isinstance(formatted, str):
        return formatted
    return None


def read_message(event_type: str, content: dict, limit: int | None = None) -> OwnerMessage:
    """What an owner's event of `event_type` says to the agents (the kinds:
    docs/using.md "What each message kind does"). `limit`: the largest attachment taken; a bigger
    declared size is refused at once."""
    if event_type in POLL_TYPES:
        return _poll(content)
    if event_type == STICKER:
        body = _str(content.get("body")).strip()
        attachment = _attachment("image", content, name=body or "sticker", label="sticker")
        if attachment is None:
            return OwnerMessage(note="This sticker carries no image, so nothing was passed on.")
        stored = f"[sticker: {body}]" if body else "[sticker]"
        return _sized(OwnerMessage(stored=stored, attachment=attachment), limit)
    msgtype = content.get("msgtype") if isinstance(content.get("msgtype"), str) else None
    body = _str(content.get("body"))
    if msgtype in SILENT_MSGTYPES:
        return OwnerMessage(silent=True)
    if msgtype in ATTACHMENT_TYPES:
        return _sized(_media_message(ATTACHMENT_TYPES[msgtype], content), limit)
    if msgtype == "m.emote":
        text = f"*{body.strip()}*" if body.strip() else ""
        return OwnerMessage(text=text, stored=text)
    if msgtype == "m.location":
        return _location(content)
    # m.text, and kinds this bridge does not know that have a body: their body is what they say
    return OwnerMessage(text=body, stored=body, formatted=_html(content), plain=msgtype in ("m.text", None))


def _sized(message: OwnerMessage, limit: int | None) -> OwnerMessage:
    attachment = message.attachment
    if attachment is None or limit is None or attachment.size is None or attachment.size <= limit:
        return message
    return OwnerMessage(
        note=f"{attachment.called} is {mib(attachment.size)}; agents take attachments of "
        f"up to {mib(limit)} (limits.attachment_mib), so it was not passed on."
    )


def _file_name(content: dict, fallback: str) -> str:
    filename, body = _str(content.get("filename")).strip(), _str(content.get("body")).strip()
    return posixpath.basename(filename or body) or fallback


def _caption(content: dict) -> str:
    """A media message's caption (Matrix 1.10): its body, when a `filename` differs from it."""
    filename, body = _str(content.get("filename")), _str(content.get("body"))
    return body if filename and body.strip() and body != filename else ""


def _mimetype(content: dict, name: str) -> str:
    info = content.get("info") if isinstance(content.get("info"), dict) else {}
    declared = _str(info.get("mimetype")).split(";")[0].strip().lower()
    if declared and declared != "application/octet-stream":
        return declared
    return mimetypes.guess_type(name)[0] or declared or "application/octet-stream"


def _attachment(kind: str, content: dict, name: str, label: str) -> Attachment | None:
    url = content.get("url") if isinstance(content.get("url"), str) else None
    file = content.get("file") if isinstance(content.get("file"), dict) else None
    if file is not None and not (isinstance(file.get("url"), str) and file["url"].startswith("mxc://")):
        file = None  # an encrypted file is only where its mxc:// URI says
    if not (url and url.startswith("mxc://")) and file is None:
        return None
    info = content.get("info") if isinstance(content.get("info"), dict) else {}
    size = info.get("size")
    mimetype = _mimetype(content, name)
    if kind == "file" and mimetype.startswith(("image/", "audio/")) and mimetype != "image/svg+xml":
        kind = mimetype.split("/")[0]  # an image or a recording sent "as a file" is still one
    return Attachment(
        kind=kind,
        name=name,
        mimetype=mimetype,
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        url=url if file is None else None,
        file=file,
        label=label,
    )


def _media_message(kind: str, content: dict) -> OwnerMessage:
    name = _file_name(content, kind)
    attachment = _attachment(kind, content, name, label=kind)
    if attachment is None:
        return OwnerMessage(note=f"{name}: the message carries no file, so nothing was passed on.")
    caption = _caption(content)
    stored = f"{attachment.tag} {caption}".strip()
    return OwnerMessage(
        text=caption, stored=stored, formatted=_html(content) if caption else None, attachment=attachment
    )


def _location(content: dict) -> OwnerMessage:
    geo = _str(content.get("geo_uri")).strip()
    location = content.get("org.matrix.msc3488.location") or content.get("m.location")
    described = _str(location.get("description")) if isinstance(location, dict) else ""
    label = (described or _str(content.get("body"))).strip()
    if not geo and not label:
        return OwnerMessage(note="This location has no place in it, so nothing was passed on.")
    text = f"[location: {label}] {geo}".strip() if label else f"[location] {geo}"
    return OwnerMessage(text=text, stored=text)


def _extensible_text(value: Any) -> str:
    """The text of an extensible-events text block: `m.text` / `org.matrix.msc1767.text`
    (a string, or a list of {body, mimetype}), or a plain `body`."""
    if not isinstance(value, dict):
        return ""
    for key in ("m.text", "org.matrix.msc1767.text", "body"):
        text = value.get(key)
        if isinstance(text, str):
            return text.strip()
        if isinstance(text, list):
            for item in text:
                if (
                    isinstance(item, dict)
                    and isinstance(item.get("body"), str)
                    and item.get("mimetype", "text/plain") == "text/plain"
                ):
                    return item["body"].strip()
    return ""


def _poll(content: dict) -> OwnerMessage:
    """A poll: its question and answers become the prompt text (the agent answers in words;
    it cannot vote)."""
    poll = content.get("m.poll") or content.get("org.matrix.msc3381.poll.start")
    poll = poll if isinstance(poll, dict) else {}
    question = _extensible_text(poll.get("question"))
    answers = poll.get("answers") if isinstance(poll.get("answers"), list) else []
    answers = [_extensible_text(a) for a in answers if isinstance(a, dict)]
    answers = [a for a in answers if a]
    if not question:
        fallback = _extensible_text(content)
        if not fallback:
            return OwnerMessage(note="This poll has no question in it, so nothing was passed on.")
        return OwnerMessage(text=f"[poll] {fallback}", stored=f"[poll] {fallback}")
    text = "\n".join([f"[poll] {question}", *(f"{i}. {a}" for i, a in enumerate(answers, 1))])
    return OwnerMessage(text=text, stored=text)


def restored(message_text: str) -> bool:
    """Whether a stored owner message was an attachment (its store text starts with the tag):
    a message taken up again after a restart then reads its event once more for the file."""
    return message_text.startswith(tuple(f"[{label}: " for label in (*ATTACHMENT_TYPES.values(), "sticker")))


# ---- out: an agent's media ----------------------------------------------------------------------


@dataclass(frozen=True)
class OutgoingMedia:
    """Media from an agent, to upload and post in the answer's place."""

    msgtype: str  # m.image / m.audio / m.file
    name: str
    mimetype: str
    data: bytes | None = None  # the bytes, when the block carried them
    path: Path | None = None  # a local file a resource_link points to (read when posted)

    @property
    def tag(self) -> str:
        return f"[{self.msgtype[2:]}: {self.name}]"


def _msgtype(mime: str) -> str:
    if mime.startswith("image/") and mime != "image/svg+xml":
        return "m.image"
    if mime.startswith("audio/"):
        return "m.audio"
    return "m.file"


def _name_for(uri: str, mime: str, fallback: str) -> str:
    name = posixpath.basename(unquote(urlparse(uri).path)) if uri else ""
    if name:
        return name
    extension = mimetypes.guess_extension(mime) or ""
    return f"{fallback}{extension}"


def _decoded(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=False)
    except (binascii.Error, ValueError):
        return None


def outgoing_part(block: Any) -> OutgoingMedia | str | None:
    """An agent_message_chunk's content as media to post, or as text (a link); None when it is
    a plain text block (the caller appends its text)."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind in ("image", "audio"):
        mime = _str(block.get("mimeType")) or ("image/png" if kind == "image" else "audio/wav")
        data = _decoded(block.get("data"))
        if data is None:
            return f"[an {kind} that could not be read]"
        return OutgoingMedia(
            "m.image" if kind == "image" else "m.audio", _name_for(_str(block.get("uri")), mime, kind), mime, data
        )
    if kind == "resource":
        resource = block.get("resource") if isinstance(block.get("resource"), dict) else {}
        uri = _str(resource.get("uri"))
        if isinstance(resource.get("text"), str):
            mime = _str(resource.get("mimeType")) or "text/plain"
            return OutgoingMedia("m.file", _name_for(uri, mime, "file"), mime, resource["text"].encode("utf-8"))
        data = _decoded(resource.get("blob"))
        if data is None:
            return f"[a resource that could not be read: {uri or '?'}]"
        mime = _str(resource.get("mimeType")) or mimetypes.guess_type(uri)[0] or "application/octet-stream"
        return OutgoingMedia(_msgtype(mime), _name_for(uri, mime, "file"), mime, data)
    if kind == "resource_link":
        uri, name = _str(block.get("uri")), _str(block.get("title")) or _str(block.get("name"))
        parsed = urlparse(uri)
        if parsed.scheme == "file" and parsed.path:
            path = Path(unquote(parsed.path))
            mime = _str(block.get("mimeType")) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            return OutgoingMedia(_msgtype(mime), _str(block.get("name")) or path.name, mime, path=path)
        return f"[{name or uri}]({uri})" if uri else (f"[{name}]" if name else "")
    return None


# ---- transfer ------------------------------------------------------------------------------------


async def fetch(intent: Intent, attachment: Attachment, limit: int) -> bytes:
    """The attachment's bytes (fetched once per message, then kept on it); MediaError with the
    owner's line when it is too big or cannot be had."""
    if attachment.data is not None:
        return attachment.data
    mxc = attachment.mxc or ""
    try:
        data = await intent.download(mxc, limit)
    except MediaError:
        raise
    except TooLarge:
        raise MediaError(
            f"{attachment.name} is bigger than the {mib(limit)} agents take "
            f"(limits.attachment_mib), so it was not passed on."
        ) from None
    except Exception as exc:
        log.warning("downloading %s (%s): %s", attachment.name, mxc, exc)
        raise MediaError(
            f"{attachment.name} could not be fetched from the homeserver ({exc}), so it was not passed on."
        ) from None
    if attachment.file is not None:
        data = await asyncio.to_thread(_decrypt, attachment, data)
    attachment.data = data
    return data


def _decrypt(attachment: Attachment, data: bytes) -> bytes:
    file = attachment.file or {}
    key = file.get("key") if isinstance(file.get("key"), dict) else {}
    hashes = file.get("hashes") if isinstance(file.get("hashes"), dict) else {}
    try:
        return decrypt_attachment(data, _str(key.get("k")), _str(hashes.get("sha256")), _str(file.get("iv")))
    except (EncryptionError, ValueError, TypeError, binascii.Error) as exc:
        raise MediaError(f"{attachment.name} could not be decrypted ({exc}), so it was not passed on.") from None


async def post(intent: Intent, room_id: str, media: OutgoingMedia, limit: int, files: FileGate | None = None) -> str:
    """Upload `media` and send it into `room_id`; its event id. MediaError when it cannot be —
    a local file the agent named is read only through `files`, the gate of
    channels/turns/agent_files.py (none: refused)."""
    data = media.data
    if data is None and media.path is not None:
        if files is None:
            raise MediaError("agents post files only from their working directory")
        data = await files.read(media.path, limit)
    data = data or b""
    if len(data) > limit:
        raise MediaError(f"{media.name} is {mib(len(data))}, more than the {mib(limit)} limit (limits.attachment_mib)")
    content: dict[str, Any] = {
        "msgtype": media.msgtype,
        "body": media.name,
        "filename": media.name,
        "info": {"mimetype": media.mimetype, "size": len(data)},
    }
    if await intent.encrypts(room_id):
        ciphertext, keys = await asyncio.to_thread(encrypt_attachment, data)
        mxc = await intent.upload(ciphertext, "application/octet-stream", media.name)
        content["file"] = {"url": mxc, **keys}
    else:
        content["url"] = await intent.upload(data, media.mimetype, media.name)
    return await intent.send(room_id, content)
