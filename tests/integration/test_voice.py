"""Voice notes end to end (docs/voice.md): a note spoken by espeak-ng, encoded to Ogg/Opus and
sent as Element sends a voice message, reaches an agent without audio prompts as a marked
transcript, with the 🎙 line in the conversation first — in a plain room, in a thread, in an
encrypted room; an agent taking audio gets the audio too; bad audio is one line; `!voice on`
brings each final answer back as a playable voice note.

Real Synapse, the real bridge in-process, scripted agents logging what they receive, the real
engine (Whisper tiny.en from the `voice` extra) and espeak-ng.
"""

from __future__ import annotations

import asyncio
import base64
import io

import av
import nio
from bridge_harness import agent, answers_in
from helpers import in_thread, is_final, open_dm, received, say
from matrix_helpers import events_in, sync_until
from nio.crypto.attachments import encrypt_attachment
from test_attachments import download, upload
from test_e2ee import e2e_owner, open_encrypted_dm
from test_e2ee import say as say_encrypted

from bridge.voice.audio import RATE, decode
from bridge.voice.engine import ENGINE
from bridge.voice.speech import speak
from bridge.voice.words import HEARD, TRANSCRIPT_TAG, word_error_rate

ALICE = "@sk_alice:localhost"
BOB = "@sk_bob:localhost"
SENTENCE = "What is the weather going to be like this afternoon?"
SPOKEN_WORDS = {"weather", "afternoon"}


def element_voice(data: bytes, duration_ms: int, url: str | None = None, file: dict | None = None) -> dict:
    """The content Element Web sends for a recorded voice message."""
    where = {"url": url} if url else {"file": file}
    return {
        "msgtype": "m.audio",
        "body": "Voice message",
        **where,
        "info": {"mimetype": "audio/ogg", "size": len(data), "duration": duration_ms},
        "org.matrix.msc1767.audio": {"duration": duration_ms, "waveform": [0, 512, 1024, 512, 0]},
        "org.matrix.msc1767.file": {"name": "Voice message.ogg", "mimetype": "audio/ogg", "size": len(data), **where},
        "org.matrix.msc1767.text": "Voice message",
        "org.matrix.msc3245.voice": {},
    }


async def send_voice(owner, room_id: str, data: bytes, duration_ms: int, **extra) -> str:
    content = {
        **element_voice(data, duration_ms, url=await upload(owner, data, "audio/ogg", "Voice message.ogg")),
        **extra,
    }
    response = await owner.room_send(room_id, "m.room.message", content)
    assert isinstance(response, nio.RoomSendResponse), response
    return response.event_id


def prompt_blocks(log_path) -> list[list[dict]]:
    return [m["params"]["prompt"] for m in received(log_path) if m.get("method") == "session/prompt"]


async def prompted(log_path, count: int = 1) -> list[list[dict]]:
    for _ in range(1200):
        found = prompt_blocks(log_path)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"{log_path.name}: {count} prompt(s) never came")


def body_of(event: dict) -> str:
    content = event.get("content") or {}
    return (content.get("m.new_content") or content).get("body", "")


async def heard_then_answered(owner, room_id: str, sender: str, answer: str) -> tuple[dict, list[dict]]:
    """Waits for the 🎙 line and the final answer; the 🎙 event, and the timeline then."""

    def done():
        events = events_in(owner, room_id)
        return any(body_of(e).startswith(HEARD) for e in events if e.get("sender") == sender) and any(
            body_of(e) == answer for e in events if e.get("sender") == sender
        )

    await sync_until(owner, done, timeout=180)
    events = list(events_in(owner, room_id))
    heard = next(e for e in events if e.get("sender") == sender and body_of(e).startswith(HEARD))
    return heard, events


def assert_heard_first(events: list[dict], heard: dict, sender: str, answer: str) -> None:
    """The 🎙 line came before the answer: before its text, and before the answer's own event
    (what its edits replace), where a client shows the answer in the room."""
    index = {e["event_id"]: i for i, e in enumerate(events)}
    final = next(e for e in events if e.get("sender") == sender and body_of(e) == answer)
    assert index[heard["event_id"]] < index[final["event_id"]]
    relation = final["content"].get("m.relates_to") or {}
    original = relation["event_id"] if relation.get("rel_type") == "m.replace" else final["event_id"]
    assert index[heard["event_id"]] < index[original]


def spoken_words_in(text: str) -> None:
    assert set(text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split()) >= SPOKEN_WORDS, text


async def test_a_voice_note_reaches_an_agent_without_audio_as_a_marked_transcript_in_the_main_timeline_and_a_thread(
    bridge_factory, tmp_path, owner
):
    alice_log, bob_log = tmp_path / "alice.log", tmp_path / "bob.log"
    await bridge_factory(
        {
            "alice": agent("--log", str(alice_log), "--answer", "heard it"),
            "bob": agent("--log", str(bob_log), "--prompt-caps", "audio", "--answer", "heard it"),
        }
    )
    note, duration_ms = await speak(SENTENCE)
    room = await open_dm(owner)
    sent = await send_voice(owner, room, note, duration_ms)
    heard, events = await heard_then_answered(owner, room, ALICE, "heard it")
    assert heard["content"]["msgtype"] == "m.notice"
    spoken_words_in(heard["content"]["body"])
    assert_heard_first(events, heard, ALICE, "heard it")
    (first,) = await prompted(alice_log)
    assert [b["type"] for b in first] == ["text"]  # no audio block: alice does not take audio
    assert first[0]["text"].startswith(TRANSCRIPT_TAG)
    spoken_words_in(first[0]["text"])
    edits, words = word_error_rate(SENTENCE, first[0]["text"].removeprefix(TRANSCRIPT_TAG))
    assert edits <= words // 4, first[0]["text"]

    # in a thread: the 🎙 line and the answer are in that thread
    await sync_until(owner, lambda: any(a["body"] == "heard it" for a in answers_in(events_in(owner, room), ALICE)))
    in_the_thread = await send_voice(owner, room, note, duration_ms, **in_thread(sent, sent))
    await prompted(alice_log, 2)

    def threaded_heard():
        return [
            e
            for e in events_in(owner, room)
            if e.get("sender") == ALICE
            and body_of(e).startswith(HEARD)
            and (e["content"].get("m.relates_to") or {}).get("event_id") == sent
            and (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.thread"
        ]

    await sync_until(owner, threaded_heard, timeout=180)
    assert in_the_thread

    # an agent taking audio gets the transcript and the audio itself
    bob_room = await open_dm(owner, BOB)
    await send_voice(owner, bob_room, note, duration_ms)
    (bob_prompt,) = await prompted(bob_log)
    assert [b["type"] for b in bob_prompt] == ["text", "audio"]
    assert bob_prompt[0]["text"].startswith(TRANSCRIPT_TAG)
    spoken_words_in(bob_prompt[0]["text"])
    assert bob_prompt[1]["mimeType"] == "audio/ogg" and base64.b64decode(bob_prompt[1]["data"]) == note


async def test_a_voice_note_in_an_encrypted_room_is_transcribed(homeserver, bridge_factory, tmp_path):
    log = tmp_path / "alice.log"
    await bridge_factory({"alice": agent("--log", str(log), "--answer", "heard it")}, encryption="on")
    note, duration_ms = await speak(SENTENCE)
    async with e2e_owner(homeserver) as (owner, _seen):
        room = await open_encrypted_dm(owner, ALICE)
        await say_encrypted(owner, room, "hello")  # the room key reaches the puppet's device
        ciphertext, keys = encrypt_attachment(note)
        mxc = await upload(owner, ciphertext, "application/octet-stream", "Voice message.ogg")
        await owner.sync(timeout=0)
        response = await owner.room_send(
            room,
            "m.room.message",
            element_voice(note, duration_ms, file={"url": mxc, **keys}),
            ignore_unverified_devices=True,
        )
        assert isinstance(response, nio.RoomSendResponse), response
        heard, events = await heard_then_answered(owner, room, ALICE, "heard it")
        spoken_words_in(heard["content"]["body"])
        texts = [blocks[0]["text"] for blocks in await prompted(log, 2)]
        assert texts[1].startswith(TRANSCRIPT_TAG)
        spoken_words_in(texts[1])


async def test_bad_audio_and_a_long_note_get_one_line_each_and_the_channel_goes_on(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    await bridge_factory({"alice": agent("--log", str(log), "--answer", "ok")}, voice_max_seconds=1)
    room = await open_dm(owner)
    corrupt = b"OggS\x00\x02" + bytes(range(256)) * 8
    await send_voice(owner, room, corrupt, 3000)
    await sync_until(
        owner,
        lambda: any("not audio the decoder can read" in a["body"] for a in answers_in(events_in(owner, room), ALICE)),
        timeout=120,
    )
    (line,) = [a for a in answers_in(events_in(owner, room), ALICE) if "decoder" in a["body"]]
    assert line["body"].startswith("⚠️ Voice message is not audio the decoder can read")
    assert "\n" not in line["body"]

    note, duration_ms = await speak(SENTENCE)  # ~3 s: over the 1 s limit
    await send_voice(owner, room, note, duration_ms)
    heard, _ = await heard_then_answered(owner, room, ALICE, "ok")
    assert heard["content"]["body"].splitlines()[-1] == (
        "The voice note is 0:03 long; only its first 0:01 were transcribed (voice_max_seconds)."
    )

    await say(owner, room, "still there?")
    await sync_until(
        owner,
        lambda: len([a for a in answers_in(events_in(owner, room), ALICE) if a["body"] == "ok" and is_final(a)]) >= 2,
        timeout=120,
    )
    texts = [blocks[0]["text"] for blocks in prompt_blocks(log)]
    assert len(texts) == 2 and texts[1].endswith("still there?")  # the corrupt note never reached it


async def test_voice_on_brings_the_final_answer_back_as_a_playable_ogg_opus_voice_note(
    homeserver, bridge_factory, tmp_path, owner
):
    answer = "Remind me to call my sister at six in the evening."
    await bridge_factory({"alice": agent("--answer", answer)})
    room = await open_dm(owner)
    await say(owner, room, "!voice on")
    await sync_until(
        owner,
        lambda: any(
            a["body"].startswith("🔊 Spoken answers are on") for a in answers_in(events_in(owner, room), ALICE)
        ),
    )
    await say(owner, room, "what was I to do?")

    def voice_notes():
        return [
            e
            for e in events_in(owner, room)
            if e.get("sender") == ALICE and (e.get("content") or {}).get("msgtype") == "m.audio"
        ]

    await sync_until(owner, voice_notes, timeout=180)
    (event,) = voice_notes()
    content = event["content"]
    assert "org.matrix.msc3245.voice" in content and content["info"]["mimetype"] == "audio/ogg"
    assert content["info"]["duration"] > 1000
    data = await download(homeserver, owner, content["url"])
    with av.open(io.BytesIO(data)) as played:
        assert played.format.name == "ogg" and played.streams.audio[0].codec_context.name == "opus"
    decoded = await decode(data, 60)
    assert abs(decoded.seconds * 1000 - content["info"]["duration"]) < 200
    assert len(decoded.samples) / 4 / RATE > 1.0
    heard = (await ENGINE.transcribe(decoded.samples)).text.lower()
    assert "sister" in heard and "evening" in heard, heard  # it says the answer

    await say(owner, room, "!voice off")
    await sync_until(
        owner,
        lambda: any(a["body"].startswith("Spoken answers are off") for a in answers_in(events_in(owner, room), ALICE)),
    )
