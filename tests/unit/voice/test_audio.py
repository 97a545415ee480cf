"""Audio in and out (bridge/voice/audio.py): what the decoder child's exit says, a real Opus
round trip through PyAV's FFmpeg, and a decoder that crashes or finds no audio — one line each."""

from __future__ import annotations

import io
import math
import struct
import sys
import wave

import pytest

from bridge.voice.audio import RATE, AudioError, Decoded, decode, decoded_output, encode_opus


def tone(seconds: float, rate: int = 22050) -> bytes:
    """A WAV of a 440 Hz tone."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(
            b"".join(
                struct.pack("<h", int(12000 * math.sin(2 * math.pi * 440 * i / rate)))
                for i in range(int(seconds * rate))
            )
        )
    return out.getvalue()


def test_the_childs_exit_is_the_samples_or_one_line():
    assert decoded_output(0, b"\0" * 8, b"seconds=2.500\n", "n") == Decoded(b"\0" * 8, 2.5)
    with pytest.raises(
        AudioError,
        match=r"^note.ogg is not audio the decoder can read \(no audio stream\), "
        r"so it was not transcribed\.$",
    ):
        decoded_output(2, b"", b"not audio: no audio stream\n", "note.ogg")
    with pytest.raises(AudioError, match=r"^The audio decoder crashed on n \(SIGSEGV\), so it was not transcribed\.$"):
        decoded_output(-11, b"", b"", "n")
    with pytest.raises(AudioError, match=r"failed on n \(exit code 3\)"):
        decoded_output(3, b"", b"PyAV is missing", "n")
    with pytest.raises(AudioError):
        decoded_output(0, b"", b"garbage", "n")  # no length line: not taken as audio


async def test_a_wav_becomes_ogg_opus_and_decodes_back_to_its_length():
    ogg, duration_ms = encode_opus(tone(1.5))
    assert ogg.startswith(b"OggS") and b"OpusHead" in ogg[:200]
    assert abs(duration_ms - 1500) < 30
    decoded = await decode(ogg, 60)
    assert abs(decoded.seconds - 1.5) < 0.05 and abs(decoded.kept_seconds - decoded.seconds) < 1e-6


async def test_a_note_over_the_limit_keeps_only_the_limit_and_knows_its_length():
    ogg, _ = encode_opus(tone(3.0))
    decoded = await decode(ogg, 1)
    assert decoded.kept_seconds == 1.0 and len(decoded.samples) == 4 * RATE
    assert abs(decoded.seconds - 3.0) < 0.05


async def test_not_audio_is_one_line():
    with pytest.raises(
        AudioError, match=r"^song.mp3 is not audio the decoder can read \(.+\), so it was not transcribed\.$"
    ):
        await decode(b"this is a text file, not a song\n" * 50, 60, "song.mp3")


async def test_a_decoder_that_crashes_is_one_line_and_the_caller_goes_on():
    crash = [
        sys.executable,
        "-c",
        "import os, signal, sys; sys.stdin.buffer.read(); os.kill(os.getpid(), signal.SIGSEGV)",
    ]
    with pytest.raises(AudioError, match=r"^The audio decoder crashed on n.ogg \(SIGSEGV\)"):
        await decode(b"OggS" * 100, 60, "n.ogg", command=crash)
    assert (await decode(encode_opus(tone(0.5))[0], 60)).seconds > 0.4  # the next note is decoded
