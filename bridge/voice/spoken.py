"""Spoken answers (docs/voice.md "Spoken answers"): `!voice on|off` per channel (stored:
store/keys.py `voice`), and an agent's final answer also posted as a voice note — Ogg/Opus,
`m.audio` with Element's voice flag and its duration — in the answer's conversation.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from nio.crypto.attachments import encrypt_attachment

from store import StoreError, keys

from .audio import AudioError
from .speech import speak, tts_missing
from .words import VOICE_ON, speakable, voice_content, voice_state, voice_switch

if TYPE_CHECKING:
    from store.offloop import OffLoop

    from ..matrix.intent import Intent

log = logging.getLogger(__name__)

COMMANDS = ("voice",)
VOICE_FILE = "answer.ogg"


class VoiceCommand:
    """`!voice on|off` in a channel (`!voice`: tells), answered where it was typed."""

    def __init__(self, db: OffLoop, notices: Any):
        self.db, self.notices = db, notices

    async def command(self, portal: Any, name: str, args: tuple[str, ...], here: Any = None) -> None:
        async def say(text: str) -> None:
            await self.notices.notice(portal, text, relates_to=getattr(here, "relates_to", None))

        try:
            switch = voice_switch(args)
        except ValueError as exc:
            await say(str(exc))
            return
        key = keys.voice(portal.channel.id)
        if switch is None:
            await say(voice_state(await self.db.get_value(key) == VOICE_ON))
            return
        if switch:
            missing = tts_missing()
            if missing is not None:
                await say(f"Spoken answers need a local voice: {missing}.")
                return
            await self.db.set_value(key, VOICE_ON)
        else:
            await self.db.delete_value(key)
        await say(voice_state(switch))


async def speak_answer(
    db: OffLoop, channel_id: str, intent: Intent, room_id: str, text: str, language: str
) -> str | None:
    """With spoken answers on in the channel: `text` read aloud and posted by `intent` (the
    answering puppet, in its conversation); the voice note's event id. A failure is logged and
    said in one line; the written answer is already there."""
    if not text.strip():
        return None
    try:
        if await db.get_value(keys.voice(channel_id)) != VOICE_ON:
            return None
    except StoreError as exc:  # the database away: the written answer stands, unread
        log.info("spoken answer in %s not known to be on: %s", room_id, exc)
        return None
    said = speakable(text)
    try:
        data, duration_ms = await speak(said, language)
        content = voice_content(VOICE_FILE, len(data), duration_ms, said)
        if await intent.encrypts(room_id):
            ciphertext, file = await asyncio.to_thread(encrypt_attachment, data)
            content["file"] = {"url": await intent.upload(ciphertext, "application/octet-stream", VOICE_FILE), **file}
        else:
            content["url"] = await intent.upload(data, "audio/ogg", VOICE_FILE)
        return await intent.send(room_id, content)
    except AudioError as exc:
        log.warning("spoken answer in %s: %s", room_id, exc)
        await _say(intent, room_id, f"⚠️ The answer could not be read aloud: {exc}.")
    except Exception as exc:  # the homeserver did not take it: the written answer stands
        log.warning("spoken answer in %s not posted: %s", room_id, exc)
    return None


async def _say(intent: Intent, room_id: str, text: str) -> None:
    try:
        await intent.send(room_id, {"msgtype": "m.notice", "body": text})
    except Exception as exc:
        log.warning("in %s: %s", room_id, exc)
