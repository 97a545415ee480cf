"""What `sidekicks check` and `sidekicks up` say about voice notes (bridge/voice/engine.py
`check_line`, `up_hint`): the real command on a real install, and each case of the lines."""

from __future__ import annotations

import sys

from test_check import SCRIPTED, check, write_config

from bridge.voice import engine
from config.model import VoiceConfig


def test_check_says_transcription_is_available_here(tmp_path):
    result = check(write_config(tmp_path, {"scripted": {"command": [sys.executable, SCRIPTED]}}))
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("voice notes:")]
    assert line.startswith("voice notes: ✓ transcribed on this machine by Whisper tiny.en"), line
    assert "up to 5:00 each" in line and line.endswith("spoken answers (!voice on): espeak-ng")


def test_the_lines_for_off_another_language_and_a_missing_engine(monkeypatch):
    assert engine.check_line(VoiceConfig(enabled=False)) == "voice notes: not transcribed (voice: off)"
    assert engine.up_hint(VoiceConfig(enabled=False)) is None
    assert "voice_language de: this model hears English only" in engine.check_line(VoiceConfig(language="de"))
    assert engine.up_hint(VoiceConfig()) is None  # installed here
    monkeypatch.setattr(engine, "missing", lambda: "the voice extra is not installed (x is missing)")
    assert (
        engine.check_line(VoiceConfig())
        == "voice notes: ✗ not transcribed: the voice extra is not installed (x is missing)"
    )
    assert engine.up_hint(VoiceConfig()) == (
        "Voice notes are not transcribed here: add the voice extra "
        "(pip install -e '.[voice]'; ./sidekicks up installs it)."
    )
