"""What voice notes say, in words (pure; docs/voice.md).

- `transcript_prompt(heard, caption)` — the prompt text an agent gets for a voice note.
- `heard_line(heard, cut)` — the "🎙 …" line the owner sees before the answer.
- `cut_line(seconds, limit)` / `progress_status(done, total)` — a long note's lines.
- `voice_switch(args)` / `voice_state(on)` — `!voice on|off` per channel.
- `speakable(markdown, limit)` — an answer's text as a TTS reads it (no Markdown marks).
- `voice_content(...)` — the `m.audio` content of a voice note (Element's shape, MSC3245).
- `word_error_rate(reference, hypothesis)` — for the accuracy bench and the tests.
"""

from __future__ import annotations

import re

HEARD = "🎙 "
TRANSCRIPT_TAG = "[Voice note, transcribed]"
NOTHING_HEARD = "(nothing could be made out)"
VOICE_ON = "on"
SPEAK_CHARS = 2000  # an answer longer than this is read up to here (a phone listens, not reads)


def clock(seconds: float) -> str:
    """A length for people: 0:07, 4:05, 1:02:03."""
    whole = max(0, int(round(seconds)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def transcript_prompt(heard: str, caption: str = "") -> str:
    """The prompt text for a voice note: marked as a transcript, the caption (if any) first."""
    body = heard.strip() or NOTHING_HEARD
    text = f"{TRANSCRIPT_TAG} {body}"
    return f"{caption.strip()}\n\n{text}" if caption.strip() else text


def heard_line(heard: str, cut: str | None = None) -> str:
    """What the owner sees of what was heard (and, for a long note, where it was cut)."""
    line = HEARD + (heard.strip() or NOTHING_HEARD)
    return f"{line}\n{cut}" if cut else line


def cut_line(seconds: float, limit: float) -> str | None:
    """The one line a note over the limit gets; None within it."""
    if seconds <= limit:
        return None
    return (
        f"The voice note is {clock(seconds)} long; only its first {clock(limit)} were transcribed (voice_max_seconds)."
    )


def progress_status(done: float, total: float) -> str:
    """The answer's status while a long note is transcribed."""
    share = 0 if total <= 0 else min(100, int(100 * done / total))
    return f"🎙 transcribing the voice note… {share} %"


def voice_switch(args: tuple[str, ...]) -> bool | None:
    """`!voice on|off` → True / False; `!voice` → None (tell). ValueError: the line to say."""
    if not args:
        return None
    word = args[0].strip().lower()
    if len(args) == 1 and word in ("on", "off"):
        return word == "on"
    raise ValueError("Usage: !voice on|off — the agents' final answers here also as voice notes.")


def voice_state(on: bool) -> str:
    return (
        "🔊 Spoken answers are on here: each final answer also comes as a voice note (!voice off)."
        if on
        else "Spoken answers are off here (!voice on reads each final answer aloud)."
    )


_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKS = re.compile(r"(^|\s)[#>*+\-]+\s|[*_`~|]")
_URL = re.compile(r"https?://\S+")


def speakable(markdown: str, limit: int = SPEAK_CHARS) -> str:
    """An answer as a TTS should read it: code blocks said to be there, links by their text,
    no Markdown marks nor addresses, at most `limit` characters (cut at a sentence or word)."""
    text = _CODE_BLOCK.sub(" (code block) ", markdown)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub("a link", text)
    text = "\n".join(_MARKS.sub(r"\1", line) for line in text.splitlines())
    text = "\n".join(" ".join(line.split()) for line in text.splitlines())
    text = re.sub(r"\n\s*\n+", "\n", text).strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    end = max(head.rfind(". "), head.rfind("\n"))
    if end < limit // 2:
        end = head.rfind(" ")
    return head[: end + 1 if end > 0 else limit].strip() + " … the rest is in the written answer."


def voice_content(name: str, size: int, duration_ms: int, transcript: str = "") -> dict:
    """The `m.audio` content of a voice note as Element sends it (MSC3245 voice flag, the
    MSC1767 audio block with its duration); the url or file is added by the sender."""
    return {
        "msgtype": "m.audio",
        "body": name,
        "filename": name,
        "info": {"mimetype": "audio/ogg", "size": size, "duration": duration_ms},
        "org.matrix.msc1767.audio": {"duration": duration_ms},
        "org.matrix.msc1767.text": transcript or name,
        "org.matrix.msc3245.voice": {},
    }


def is_voice_note(content: dict) -> bool:
    """Whether an `m.audio` content is a recorded voice note (not an audio file)."""
    return "org.matrix.msc3245.voice" in content or "org.matrix.msc2516.voice" in content


def words(text: str) -> list[str]:
    """Lower-case words, punctuation gone (numbers kept): what a word error rate compares."""
    return re.findall(r"[a-z0-9']+", text.lower().replace("’", "'"))


def word_error_rate(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edits, reference words): substitutions + deletions + insertions, by Levenshtein over
    words. The rate is edits / words."""
    ref, hyp = words(reference), words(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1], len(ref)
