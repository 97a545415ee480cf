"""A voice note heard for a turn (bridge/voice/listen.py, through channels/turns/prompt.py's hook):
the real decoder and engine, an Intent that records what it sends. The transcript is the
prompt; an agent taking audio gets the audio too; one message is transcribed once; a long
note shows its progress; voice off keeps the old line."""

from __future__ import annotations

import pytest

from bridge.channels.turns.prompt import attachment_prompt
from bridge.matrix.media import Attachment
from bridge.voice import listen
from bridge.voice.listen import Listening
from bridge.voice.speech import speak

SENTENCE = "Remind me to call my sister at six in the evening."


class Recorder:
    """What a puppet's Intent is to the hook: it sends, and the note is already fetched."""

    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    async def send(self, room_id: str, content: dict) -> str:
        self.sent.append((room_id, content))
        return f"$e{len(self.sent)}"


@pytest.fixture(scope="module")
async def note() -> bytes:
    return (await speak(SENTENCE))[0]


def voice_note(data: bytes, mxc: str) -> Attachment:
    return Attachment(
        kind="audio", name="Voice message", mimetype="audio/ogg", size=len(data), url=mxc, label="audio", data=data
    )


async def test_agents_of_one_note_share_one_transcript_and_one_heard_line(note):
    intent, statuses = Recorder(), []
    listening = Listening(True, "en", 300, "!room", statuses.append)
    attachment = voice_note(note, "mxc://x/one")
    text_only, refused = await attachment_prompt(intent, attachment, "", {}, "Alice", 10**6, listening)
    assert refused is None and [b["type"] for b in text_only] == ["text"]
    assert text_only[0]["text"].startswith("[Voice note, transcribed] ")
    assert "sister" in text_only[0]["text"] and "evening" in text_only[0]["text"]
    with_audio, _ = await attachment_prompt(intent, attachment, "ctx", {"audio": True}, "Bob", 10**6, listening)
    assert [b["type"] for b in with_audio] == ["text", "audio"] and with_audio[1]["mimeType"] == "audio/ogg"
    assert with_audio[0]["text"] == "ctx\n\n" + text_only[0]["text"]
    [(room, line)] = intent.sent  # said once, by the first turn
    assert room == "!room" and line["msgtype"] == "m.notice" and line["body"].startswith("🎙 ")
    assert statuses == []  # a short note shows no progress


async def test_a_long_note_shows_its_progress_then_clears_it(note, monkeypatch):
    monkeypatch.setattr(listen, "LONG_NOTE", 1.0)
    statuses: list = []
    await attachment_prompt(
        Recorder(),
        voice_note(note, "mxc://x/long"),
        "",
        {},
        "A",
        10**6,
        Listening(True, "en", 300, "!r", statuses.append),
    )
    assert statuses[0] == "🎙 transcribing the voice note… 0 %"
    assert statuses[-2].endswith("100 %") and statuses[-1] is None


async def test_voice_off_keeps_the_line_for_agents_without_audio(note):
    intent = Recorder()
    blocks, refused = await attachment_prompt(
        intent, voice_note(note, "mxc://x/off"), "", {}, "Alice", 10**6, Listening(False, "en", 300, "!r")
    )
    assert blocks == [] and refused == "Alice cannot listen to audio, so Voice message was not passed on."
    assert intent.sent == []


async def test_a_corrupt_note_is_one_line_and_no_heard_line():
    intent = Recorder()
    blocks, refused = await attachment_prompt(
        intent,
        voice_note(b"OggS" + b"\x01" * 500, "mxc://x/bad"),
        "",
        {},
        "Alice",
        10**6,
        Listening(True, "en", 300, "!r"),
    )
    assert blocks == [] and refused.startswith("Voice message is not audio the decoder can read (")
    assert "\n" not in refused and intent.sent == []
