"""Voice notes: how well and how fast the bridge hears them (docs/voice.md "The engine: what was measured").

Twenty fixed sentences, spoken by espeak-ng, encoded to Ogg/Opus as a voice note (audio.py's
encoder), then through the bridge's own path: the decoder child, Whisper tiny.en
(bridge/voice/engine.py). Reported: the word error rate over all sentences, and transcription
time per second of audio (the decoder and the model; the model loaded once before). Beside it,
when the `pocketsphinx` package is installed, the same notes heard by pocketsphinx 5's English
model (the alternative measured in docs/voice.md).

`python -m tests.bench.run --only voice`
"""

from __future__ import annotations

import time

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Please open the file called notes and add a line about the meeting tomorrow.",
    "Can you run the tests again and tell me which ones failed?",
    "What is the weather going to be like this afternoon?",
    "Remind me to call my sister at six in the evening.",
    "The build finished without errors on the second try.",
    "Write a short summary of the last three messages in this channel.",
    "I think the bug is in the function that reads the configuration.",
    "Move the old logs into the archive folder and delete the empty ones.",
    "How many people signed up for the workshop last week?",
    "Send the report to the team before lunch on Friday.",
    "The train was late because of the snow in the mountains.",
    "Could you explain how the cache decides what to keep?",
    "Let us meet in the small room on the second floor.",
    "She bought apples, bread and a bottle of milk at the market.",
    "Turn off the lights in the kitchen when you leave.",
    "The answer should be shorter and easier to read.",
    "We need a new plan for the garden before the spring comes.",
    "Check whether the server is still running after the update.",
    "Thank you, that was exactly what I was looking for.",
)


async def run(quick: bool) -> dict:
    from bridge.voice import audio, engine, speech
    from bridge.voice.words import word_error_rate

    sentences = SENTENCES[:8] if quick else SENTENCES
    notes = []
    for sentence in sentences:
        ogg, duration_ms = await speech.speak(sentence)
        notes.append((sentence, ogg, duration_ms / 1000))
    await engine.ENGINE.transcribe((await audio.decode(notes[0][1], 60)).samples)  # the model loaded
    out = {"sentences": len(sentences), "audio_s": sum(n[2] for n in notes), "whisper": [], "quick": quick}
    spent = 0.0
    for sentence, ogg, _ in notes:
        started = time.perf_counter()
        decoded = await audio.decode(ogg, 300)
        heard = await engine.ENGINE.transcribe(decoded.samples)
        spent += time.perf_counter() - started
        out["whisper"].append((sentence, heard.text, *word_error_rate(sentence, heard.text)))
    out["whisper_s"] = spent
    out["pocketsphinx"] = await _pocketsphinx(notes)
    return out


async def _pocketsphinx(notes) -> list | None:
    try:
        from pocketsphinx import Decoder
    except ImportError:
        return None
    import numpy

    from bridge.voice import audio
    from bridge.voice.words import word_error_rate

    decoder = Decoder(samprate=audio.RATE)
    heard_all = []
    for sentence, ogg, _ in notes:
        samples = numpy.frombuffer((await audio.decode(ogg, 300)).samples, dtype="<f4")
        decoder.start_utt()
        decoder.process_raw((numpy.clip(samples, -1, 1) * 32767).astype("<i2").tobytes(), full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        text = hyp.hypstr if hyp is not None else ""
        heard_all.append((sentence, text, *word_error_rate(sentence, text)))
    return heard_all


def _rate(results: list) -> float:
    return sum(r[2] for r in results) / max(1, sum(r[3] for r in results))


def rows(r: dict) -> list[tuple]:
    wer = _rate(r["whisper"])
    other = r["pocketsphinx"]
    base = f"{_rate(other):.1%} (pocketsphinx 5)" if other is not None else "—"
    per_second = r["whisper_s"] / r["audio_s"]
    return [
        (
            "Voice",
            f"word error rate, {r['sentences']} espeak-ng sentences as Ogg/Opus notes",
            f"{wer:.1%}",
            base,
            "",
            "≤ 15 %",
            wer <= 0.15,
        ),
        (
            "Voice",
            f"transcription time per second of audio ({r['audio_s']:.0f} s of notes)",
            f"{per_second:.2f} s",
            "",
            "",
            "(info)",
            None,
        ),
    ]


def notes(r: dict) -> list[str]:
    wrong = [f"“{s}” → “{h}”" for s, h, edits, _ in r["whisper"] if edits]
    return ["voice: Whisper tiny.en misheard " + ("; ".join(wrong) if wrong else "nothing")]
