"""The `voice` keys of the configuration (config/loader.py `_voice`; docs/voice.md)."""

from __future__ import annotations

import pytest
from test_config import GOOD, write

import config
from config.model import VoiceConfig


def test_voice_defaults_to_on_where_installed_english_and_five_minutes(tmp_path):
    assert config.load(write(tmp_path, GOOD)).voice == VoiceConfig(enabled=None, language="en", max_seconds=300)


def test_voice_keys_are_read(tmp_path):
    cfg = config.load(write(tmp_path, {**GOOD, "voice": "off", "voice_language": "DE", "voice_max_seconds": 60}))
    assert cfg.voice == VoiceConfig(enabled=False, language="de", max_seconds=60)
    assert config.load(write(tmp_path, {**GOOD, "voice": True})).voice.enabled is True


def test_bad_voice_keys_are_one_line_each(tmp_path):
    with pytest.raises(config.ConfigError) as caught:
        config.load(
            write(
                tmp_path,
                {**GOOD, "voice": "loud", "voice_language": "english!", "voice_max_seconds": 0, "voice_langauge": "en"},
            )
        )
    problems = caught.value.problems
    assert len(problems) == 4
    assert any(p.endswith("voice_langauge: unknown key — did you mean voice_language?") for p in problems)
    assert any(p.endswith("voice: must be on or off, got 'loud'") for p in problems)
    assert any("voice_language: must be a language code" in p for p in problems)
    assert any(p.endswith("voice_max_seconds: must be a whole number from 1 to 14400, got 0") for p in problems)
