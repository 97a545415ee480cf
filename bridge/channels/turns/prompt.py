"""The prompt an agent gets from an owner's message: its text with the channel's context
(context.py), and its attachment as the ACP content the agent announced
(docs/architecture.md "What each agent reads", "Streaming, permissions and cancel").

- `prompt_content(attachment, data, capabilities, title)` (pure) — the attachment as the ACP
  content the agent announced (`promptCapabilities`): an `image` / `audio` block, an embedded
  `resource` (`embeddedContext`), a text file's text, else a `resource_link`; or the one line
  saying why this agent cannot take it.
- `sent_frame(attachment, size, captioned)` (pure) — the frame lines saying the owner sent it.
- `attachment_prompt(...)` — the same once the file is fetched (matrix/media.py), after those lines.
- `reread(...)` — an attachment message a previous run left: its event read again for the file.
Matrix I/O (downloads, what each message kind says) stays in matrix/media.py.
"""

from __future__ import annotations

import base64
import logging
import mimetypes
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ...matrix.media import Attachment, MediaError, OwnerMessage, fetch, mib, read_message
from ...voice.listen import Listening, hear
from ...voice.words import transcript_prompt
from .context import contents_frame, unframe

if TYPE_CHECKING:
    from ...matrix.intent import Intent

log = logging.getLogger(__name__)

TEXT_MIMETYPES = {
    "application/json",
    "application/xml",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
    "application/javascript",
    "application/x-sh",
    "application/x-python",
    "application/sql",
    "application/x-httpd-php",
    "application/ld+json",
    "application/x-ndjson",
    "image/svg+xml",
}
TEXT_SUFFIXES = {
    ".txt",
    ".md",
    ".markdown",
    ".rst",
    ".py",
    ".js",
    ".ts",
    ".tsx",
    ".jsx",
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".ini",
    ".cfg",
    ".conf",
    ".csv",
    ".tsv",
    ".xml",
    ".html",
    ".htm",
    ".css",
    ".sh",
    ".bash",
    ".zsh",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".hpp",
    ".rs",
    ".go",
    ".java",
    ".kt",
    ".rb",
    ".php",
    ".pl",
    ".lua",
    ".sql",
    ".diff",
    ".patch",
    ".log",
    ".tex",
    ".org",
    ".swift",
    ".scala",
    ".hs",
    ".ex",
    ".exs",
    ".erl",
    ".el",
    ".vim",
    ".nix",
    ".dockerfile",
    ".make",
    ".mk",
    ".gradle",
    ".proto",
    ".graphql",
}


def _is_text(attachment: Attachment, data: bytes) -> str | None:
    """The text of a text file (UTF-8, no NUL); None for anything else."""
    mime, suffix = attachment.mimetype, Path(attachment.name.lower()).suffix
    guessed = mimetypes.guess_type(attachment.name)[0] or ""
    if attachment.kind in ("image", "audio", "video") and mime != "image/svg+xml":
        return None
    if not (
        mime.startswith("text/")
        or mime in TEXT_MIMETYPES
        or guessed.startswith("text/")
        or suffix in TEXT_SUFFIXES
        or mime == "application/octet-stream"
    ):
        return None
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def prompt_content(
    attachment: Attachment, data: bytes, capabilities: dict, title: str
) -> tuple[list[dict], str | None]:
    """The ACP content blocks for `attachment` (with its bytes `data`) that an agent with these
    `promptCapabilities` can take; or ([], the one line saying why it cannot)."""
    encoded = base64.b64encode(data).decode("ascii")
    name, mime = attachment.name, attachment.mimetype
    if attachment.kind == "image":
        if capabilities.get("image"):
            return [{"type": "image", "mimeType": mime, "data": encoded}], None
        return [], f"{title} cannot look at images, so {attachment.called} was not passed on."
    if attachment.kind == "audio":
        if capabilities.get("audio"):
            return [{"type": "audio", "mimeType": mime, "data": encoded}], None
        return [], f"{title} cannot listen to audio, so {attachment.called} was not passed on."
    uri = attachment.mxc or ""
    named = {"type": "text", "text": attachment.tag}
    text = _is_text(attachment, data)
    if text is not None:
        if capabilities.get("embeddedContext"):
            return [
                named,
                {
                    "type": "resource",
                    "resource": {
                        "uri": uri,
                        "mimeType": mime if mime != "application/octet-stream" else "text/plain",
                        "text": text,
                    },
                },
            ], None
        return [{"type": "text", "text": contents_frame(name, text)}], None
    if capabilities.get("embeddedContext"):
        return [named, {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "blob": encoded}}], None
    # ACP's baseline: every agent takes a link, even one it cannot open
    return [{"type": "resource_link", "uri": uri, "name": name, "mimeType": mime, "size": len(data)}], None


KINDS = {"image": "an image", "audio": "an audio file", "video": "a video", "sticker": "a sticker"}


def _framed(text: str) -> str:
    """A name the owner chose, as it may stand inside a frame line: one line, no brackets (a
    file name cannot close the line and forge another)."""
    return " ".join(text.replace("[", "(").replace("]", ")").split()) or "(no name)"


def sent_frame(attachment: Attachment, size: int, captioned: bool) -> str:
    """The frame lines that say the owner sent a file (docs/using.md "What each message kind does"): what it is
    (name, type, size), and, with no text, that the answer is about the file itself."""
    kind = KINDS.get(attachment.label or attachment.kind, "a file")
    lines = [f"[The user sent you {kind}: {_framed(attachment.name)}, {_framed(attachment.mimetype)}, {mib(size)}]"]
    if not captioned:
        lines.append("[No text came with it: answer about the file itself.]")
    return "\n".join(lines)


def prompt_blocks(text: str, content: list[dict]) -> list[dict]:
    """The prompt: its text (the caption, with the channel's context) then the attachment."""
    return ([{"type": "text", "text": text}] if text.strip() else []) + content


async def attachment_prompt(
    intent: Intent,
    attachment: Attachment,
    text: str,
    capabilities: dict,
    title: str,
    limit: int,
    listening: Listening | None = None,
    data: bytes | None = None,
    captioned: bool | None = None,
) -> tuple[list[dict], str | None]:
    """The prompt for a message with an attachment, for an agent with these capabilities: its
    blocks, or ([], the one line saying why it cannot be passed on). The file comes after the
    frame lines saying the owner sent it; `captioned`: whether the owner wrote text with it
    (None: whether `text` has any). Audio, with `listening`
    (transcription on and installed), is transcribed: the transcript is the prompt's text, and
    an agent taking audio gets the audio too (docs/voice.md). `data`: the file, if fetched."""
    try:
        data = data if data is not None else await fetch(intent, attachment, limit)
    except MediaError as exc:
        return [], str(exc)
    if attachment.kind == "audio" and listening is not None and listening.can():
        heard = await hear(intent, attachment, data, listening)
        if heard.refused is not None:
            return [], heard.refused
        audio, _ = prompt_content(attachment, data, capabilities, title) if capabilities.get("audio") else ([], None)
        return prompt_blocks(transcript_prompt(unframe(heard.text), text), audio), None
    content, refused = prompt_content(attachment, data, capabilities, title)
    if refused is not None:
        return [], refused
    sent = {
        "type": "text",
        "text": sent_frame(attachment, len(data), bool(text.strip()) if captioned is None else captioned),
    }
    return prompt_blocks(text, [sent, *content]), None


async def heard_first(intent: Intent, attachment: Attachment | None, limit: int, hearing: Listening) -> bytes | None:
    """A voice note is heard before its answer is posted, so the 🎙 line comes first in the
    room (docs/voice.md "Voice notes in"): the note's bytes, for `attachment_prompt`, once heard
    (its transcript kept by bridge/voice/listen.py); None for any other message (or a file that
    cannot be fetched: `attachment_prompt` says why)."""
    if attachment is None or attachment.kind != "audio" or not hearing.can():
        return None
    try:
        data = await fetch(intent, attachment, limit)
    except MediaError:
        return None
    await hear(intent, attachment, data, hearing)
    return data


def listening(config: Any, portal: Any, answer: Any) -> Listening:
    """How a turn hears a voice note (bridge/voice/listen.py): the config's `voice` keys, the
    channel's room, and the answer's status line for a long note's progress."""
    voice = config.voice
    return Listening(
        enabled=voice.enabled is not False,
        language=voice.language,
        max_seconds=voice.max_seconds,
        room_id=portal.room_id,
        status=answer.set_status,
    )


async def reread(reader: Intent, room_id: str, event_id: str, limit: int) -> OwnerMessage | None:
    """An attachment message a previous run took but did not finish answering: the store kept
    its text ("[image: dot.png] caption"), so its event is read again (as `reader`, an identity
    in the room) for the file and the caption. None when it cannot be read or holds no
    attachment (the stored text then goes as the prompt)."""
    status, event = await reader.request(
        "GET", f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/event/{quote(event_id, safe='')}"
    )
    content = event.get("content") if status == 200 else None
    if not isinstance(content, dict):
        log.info("message %s could not be read again (%s): its text goes as it was stored", event_id, status)
        return None
    read = read_message(str(event.get("type") or "m.room.message"), content, limit)
    return read if read.attachment is not None else None
