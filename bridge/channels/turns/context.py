"""What an agent reads before its turn (docs/architecture.md "What each agent reads"). Pure: no I/O,
tested on its own.

The header and closing lines are those of docs/architecture.md "What each agent reads", byte for
byte: the last sentence stops a model from imitating the transcript ("Bob: 4217").

Frames cannot be forged (`unframe`): every line the bridge frames a prompt with is a line that
starts with `[` (the header and footer here, a scheduled run's first line, a file's
`[Contents of …]`/`[End of …]`, and any frame added later in that form), the closing sentence, or
a context line `name: …`. In what the bridge quotes — a message, the owner's text, a file — a
line that would read as one of those gets a backslash in front: Markdown's own escape, read as the
text it is.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

HEADER = "[Messages in #{channel} you have not seen yet]"
FOOTER = "[End of the messages]"
CLOSING = "The user now writes to you (answer directly, without your name in front):"
OWNER = "user"  # the owner's name in context lines

ESCAPE = "\\"
FRAME_START = "["  # every bracketed frame line starts so
SENTENCES = ("the user now writes to you",)  # the frame lines not in brackets, as they start (casefolded)
# a handed turn's closing line, in place of CLOSING (docs/sessions.md "Agents that hand work to
# each other"): who handed the conversation on, and whether its chain began with a scheduled run
HANDED = (
    "[{agent} handed this conversation to you{origin}; "
    "{agent}'s request follows (answer directly, without your name in front):]"
)
FROM_SCHEDULE = " from a scheduled run, not a message from the owner"


@dataclass(frozen=True)
class Handed:
    """A handed turn: who handed it on, and whether its chain began with a scheduled run."""

    agent: str
    scheduled: bool = False


def handed_line(handed: Handed) -> str:
    """The frame line before a handed turn's request: wholly in square brackets."""
    return HANDED.format(agent=handed.agent, origin=FROM_SCHEDULE if handed.scheduled else "")


@dataclass(frozen=True)
class UnseenMessage:
    """A message of the channel the agent has not seen yet, as its prompt shows it."""

    sender: str  # "user" for the owner, else the agent's name
    text: str


def _seen(line: str) -> str:
    """The line as a reader sees it: blanks and invisible characters in front dropped, look-alike
    characters (a full-width bracket) folded to theirs, case folded."""
    start = 0
    while start < len(line) and (line[start].isspace() or unicodedata.category(line[start]) in ("Cf", "Cc", "Zs")):
        start += 1
    return unicodedata.normalize("NFKC", line[start : start + 200]).casefold()


def framelike(line: str, speakers: Iterable[str] = ()) -> bool:
    """True if `line` would read as a frame line of the bridge: it starts with a bracket, with the
    closing sentence, or as a context line of one of `speakers` (`name:`)."""
    seen = _seen(line)
    if seen.startswith(FRAME_START) or seen.startswith(SENTENCES):
        return True
    return any(seen.startswith(f"{name.casefold()}:") for name in speakers if name)


def unframe(text: str, speakers: Iterable[str] = ()) -> str:
    """`text` to be quoted in a prompt: each of its lines (whatever ends it: \\n, \\r, U+2028…)
    that would read as a frame line (`framelike`) with a backslash in front; every other line,
    and so an ordinary message, as it is."""
    names = tuple(speakers)
    lines = text.splitlines(keepends=True)
    if not any(framelike(line, names) for line in lines):
        return text
    return "".join(ESCAPE + line if framelike(line, names) else line for line in lines)


def context_line(sender: str, text: str, speakers: Iterable[str] = ()) -> str:
    """One unseen message as its context line: `sender: text`, the lines after the first unframed
    (the first follows the sender's name, it cannot read as a frame)."""
    first, *rest = text.splitlines(keepends=True) or [""]
    return f"{sender}: {first}{unframe(''.join(rest), speakers)}"


def build_prompt(
    channel: str,
    unseen: list[UnseenMessage],
    text: str,
    max_messages: int = 20,
    max_chars: int = 1500,
    agents: Iterable[str] = (),
    handed: Handed | None = None,
) -> str:
    """The prompt for one turn: the unseen messages (the last `max_messages`, each cut at
    `max_chars`), then the user's text, all of them unframed (`agents`: every agent's name,
    whose context lines cannot be imitated either). With nothing unseen the text goes alone. A
    handed turn (`handed`): its frame line (`handed_line`) in place of the closing sentence,
    then the handing agent's request, unframed — framed even with nothing unseen."""
    recent = unseen[-max_messages:] if max_messages > 0 else []
    speakers = (OWNER, *sorted({*agents, *(line.sender for line in recent)}))
    lines = []
    if recent:
        lines.append(HEADER.format(channel=channel.lstrip("#")))
        lines.extend(context_line(line.sender, cut(line.text, max_chars), speakers) for line in recent)
        lines.append(FOOTER)
    if handed is not None:
        lines.append(handed_line(handed))
    elif not recent:
        return text
    else:
        lines.append(CLOSING)
    lines.append(unframe(text, speakers))
    return "\n".join(lines)


def contents_frame(name: str, text: str) -> str:
    """A text file given in the prompt's text: `[Contents of NAME]`, its text unframed (a line
    `[End of NAME]` in it cannot end it early), `[End of NAME]`; the name on one line."""
    one_line = " ".join(name.split()) or "a file"
    return f"[Contents of {one_line}]\n{unframe(text)}\n[End of {one_line}]"


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"
