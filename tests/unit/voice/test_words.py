"""What voice notes say, in words (bridge/voice/words.py; docs/voice.md)."""

from __future__ import annotations

import pytest

from bridge.voice.words import (
    clock,
    cut_line,
    heard_line,
    is_voice_note,
    progress_status,
    speakable,
    transcript_prompt,
    voice_content,
    voice_state,
    voice_switch,
    word_error_rate,
)


def test_the_transcript_is_marked_and_follows_the_caption_and_context():
    assert transcript_prompt(" open the notes ") == "[Voice note, transcribed] open the notes"
    assert transcript_prompt("open the notes", "[#general] bob: hi\nalso this") == (
        "[#general] bob: hi\nalso this\n\n[Voice note, transcribed] open the notes"
    )
    assert transcript_prompt("  ") == "[Voice note, transcribed] (nothing could be made out)"


def test_the_heard_line_starts_with_the_microphone_and_adds_the_cut():
    assert heard_line("hello there") == "🎙 hello there"
    assert heard_line("", None) == "🎙 (nothing could be made out)"
    assert heard_line("hi", "cut here") == "🎙 hi\ncut here"


@pytest.mark.parametrize("seconds, shown", [(0, "0:00"), (7.4, "0:07"), (245, "4:05"), (3723, "1:02:03")])
def test_lengths_read_as_a_clock(seconds, shown):
    assert clock(seconds) == shown


def test_only_a_note_over_the_limit_is_cut_in_one_line():
    assert cut_line(300, 300) is None
    assert cut_line(432, 300) == (
        "The voice note is 7:12 long; only its first 5:00 were transcribed (voice_max_seconds)."
    )
    assert "\n" not in cut_line(432, 300)


def test_progress_is_a_share_of_the_note():
    assert progress_status(0, 60) == "🎙 transcribing the voice note… 0 %"
    assert progress_status(30, 60).endswith("50 %")
    assert progress_status(90, 60).endswith("100 %") and progress_status(1, 0).endswith("0 %")


def test_voice_switch_reads_on_off_or_tells_and_refuses_anything_else():
    assert voice_switch(()) is None
    assert voice_switch(("ON",)) is True and voice_switch(("off",)) is False
    for bad in (("maybe",), ("on", "now")):
        with pytest.raises(ValueError, match="Usage: !voice on\\|off"):
            voice_switch(bad)
    assert voice_state(True).startswith("🔊 Spoken answers are on") and "!voice on" in voice_state(False)


def test_speakable_drops_markdown_code_and_addresses_and_cuts_long_answers():
    text = "# Title\n\n**Bold** and `code`, see [the docs](https://x.org/a) or https://y.org.\n\n```py\nx = 1\n```\n- one\n- two"
    assert speakable(text) == "Title\nBold and code, see the docs or a link\n(code block)\none\ntwo"
    long = "A sentence here. " * 300
    said = speakable(long, 200)
    assert len(said) < 260 and said.endswith("… the rest is in the written answer.")
    assert said.startswith("A sentence here. A sentence here.")


def test_a_voice_note_has_elements_shape_with_its_duration():
    content = voice_content("answer.ogg", 1234, 4100, "hello")
    assert content["msgtype"] == "m.audio" and content["org.matrix.msc3245.voice"] == {}
    assert content["info"] == {"mimetype": "audio/ogg", "size": 1234, "duration": 4100}
    assert content["org.matrix.msc1767.audio"] == {"duration": 4100}
    assert is_voice_note(content) and not is_voice_note({"msgtype": "m.audio", "body": "song.mp3"})


@pytest.mark.parametrize(
    "reference, hypothesis, result",
    [
        ("the quick brown fox", "the quick brown fox", (0, 4)),
        ("The quick, brown fox!", "the quick brown fox", (0, 4)),  # case and punctuation do not count
        ("the quick brown fox", "the quick crown fox", (1, 4)),  # a substitution
        ("the quick brown fox", "the brown fox", (1, 4)),  # a deletion
        ("the quick brown fox", "the very quick brown fox jumps", (2, 4)),  # two insertions
        ("", "anything", (1, 0)),
    ],
)
def test_word_error_rate_counts_edits_over_words(reference, hypothesis, result):
    assert word_error_rate(reference, hypothesis) == result
