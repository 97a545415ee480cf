"""Text to speech on this machine (docs/voice.md "Spoken answers"): Debian's `espeak-ng` reads
the text into a WAV, which audio.py encodes as an Ogg/Opus voice note."""

from __future__ import annotations

import asyncio
import shutil

from .audio import AudioError, encode_opus

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
    process = await asyncio.create_subprocess_exec(
        "espeak-ng",
        "--stdout",
        "-v",
        language or "en",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        wav, err = await asyncio.wait_for(process.communicate(text.encode("utf-8")), SPEAK_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AudioError(f"espeak-ng took more than {SPEAK_TIMEOUT:.0f} s") from None
    except asyncio.CancelledError:
        if process.returncode is None:
            process.kill()
        raise
    if process.returncode != 0 or not wav:
        why = err.decode("utf-8", "replace").strip().splitlines()
        raise AudioError(f"espeak-ng failed ({why[-1] if why else f'exit code {process.returncode}'})")
    return await asyncio.to_thread(encode_opus, wav)
