"""A voice note heard for a turn (docs/voice.md "Voice notes in"): decoded (audio.py),
transcribed (engine.py), the "🎙 …" line posted in the turn's conversation before the answer,
and the transcript handed back for the prompt.

One message heard once: the agents a note goes to share its transcript (and its one 🎙 line).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import engine
from .audio import AudioError, decode
from .words import cut_line, heard_line, progress_status

if TYPE_CHECKING:
    from ..matrix.intent import Intent
    from ..matrix.media import Attachment

log = logging.getLogger(__name__)

LONG_NOTE = 20.0  # seconds: a note this long shows its progress in the answer's status
KEPT = 64  # messages whose transcript is remembered (the agents of one message share it)


@dataclass(frozen=True)
class Listening:
    """What a turn needs to hear a voice note: the config's choices, where to say what was
    heard (`room_id`, through the turn's puppet), and the answer's status line."""

    enabled: bool
    language: str
    max_seconds: float
    room_id: str
    status: Callable[[str | None], None] = lambda status: None

    def can(self) -> bool:
        return self.enabled and engine.missing() is None


@dataclass(frozen=True)
class Transcript:
    text: str = ""
    refused: str | None = None  # the one line instead (not decodable, the decoder crashed)


_heard: OrderedDict[str, asyncio.Future[Transcript]] = OrderedDict()


async def hear(intent: Intent, attachment: Attachment, data: bytes, listening: Listening) -> Transcript:
    """The transcript of `attachment` (its bytes `data`); the first turn that asks transcribes
    it and posts the 🎙 line, the others wait for it."""
    key = attachment.mxc or str(id(attachment))
    known = _heard.get(key)
    if known is not None:
        try:
            return await asyncio.shield(known)
        except asyncio.CancelledError:
            if not known.cancelled():
                raise  # this turn is stopped
            # the turn that was hearing it stopped (or failed): this one hears it
    future: asyncio.Future[Transcript] = asyncio.get_running_loop().create_future()
    _heard[key] = future
    while len(_heard) > KEPT:
        _heard.popitem(last=False)
    try:
        result = await _transcribe(intent, attachment, data, listening)
    except BaseException:
        if _heard.get(key) is future:
            del _heard[key]
        future.cancel()  # the turns waiting for it hear it themselves
        raise
    future.set_result(result)
    return result


async def _transcribe(intent: Intent, attachment: Attachment, data: bytes, listening: Listening) -> Transcript:
    name = attachment.called
    try:
        decoded = await decode(data, listening.max_seconds, name)
    except AudioError as exc:
        log.info("voice note %s: %s", attachment.mxc, exc)
        return Transcript(refused=str(exc))
    kept = decoded.kept_seconds

    def progress(done: float, total: float) -> None:
        listening.status(progress_status(done, total))

    long = kept >= LONG_NOTE
    if long:
        listening.status(progress_status(0, kept))
    try:
        heard = await engine.ENGINE.transcribe(decoded.samples, listening.language, progress if long else None)
    except Exception as exc:  # the engine itself failed (its files, its library): one line
        log.warning("transcribing %s: %s", attachment.mxc, exc, exc_info=True)
        return Transcript(refused=f"{name} could not be transcribed ({exc}).")
    finally:
        if long:
            listening.status(None)
    cut = cut_line(decoded.seconds, listening.max_seconds)
    try:
        await intent.send(listening.room_id, {"msgtype": "m.notice", "body": heard_line(heard.text, cut)})
    except Exception as exc:  # the prompt goes on: the transcript is in it
        log.warning("the 🎙 line in %s: %s", listening.room_id, exc)
    return Transcript(heard.text)
