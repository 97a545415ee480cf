"""Text to speech on this machine (docs/voice.md "Spoken answers"): Debian's `espeak-ng` reads
the text into a WAV, which audio.py encodes as an Ogg/Opus voice note."""

from __future__ import annotations

import asyncio
import shutil

from .audio import AudioError, encode_opus, run_child

SPEAK_TIMEOUT = 120.0


def tts_missing() -> str | None:
    """Why spoken answers cannot be made here (one line), or None."""
    if shutil.which("espeak-ng") is None:
        return "espeak-ng is not installed on this machine (apt-get install espeak-ng)"
    try:
        import av  # noqa: F401
    except ImportError:
        return "the voice extra is not installed (pip install -e '.[voice]')"
    return None


async def speak(text: str, language: str = "en") -> tuple[bytes, int]:
    """`text` spoken: an Ogg/Opus file and its length in milliseconds. AudioError when not."""
    code, wav, err = await run_child(
        ["espeak-ng", "--stdout", "-v", language or "en"],
        text.encode("utf-8"),
        SPEAK_TIMEOUT,
        f"espeak-ng took more than {SPEAK_TIMEOUT:.0f} s",
    )
    if code != 0 or not wav:
        why = err.decode("utf-8", "replace").strip().splitlines()
        raise AudioError(f"espeak-ng failed ({why[-1] if why else f'exit code {code}'})")
    return await asyncio.to_thread(encode_opus, wav)
