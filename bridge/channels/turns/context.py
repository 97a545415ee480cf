"""What an agent reads before its turn (docs/architecture.md "What each agent reads"). Pure: no I/O,
tested on its own.

The header and closing lines are those of docs/architecture.md "What each agent reads", byte for
byte: the last sentence stops a model from imitating the transcript ("Bob: 4217").
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = "[Messages in #{channel} you have not seen yet]"
FOOTER = "[End of the messages]"
CLOSING = "The user now writes to you (answer directly, without your name in front):"
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


def build_prompt(
    channel: str,
    unseen: list[UnseenMessage],
    text: str,
    max_messages: int = 20,
    max_chars: int = 1500,
    handed: Handed | None = None,
) -> str:
    """The prompt for one turn: the unseen messages (the last `max_messages`, each cut at
    `max_chars`), then the user's text. With nothing unseen the text goes alone. A handed turn
    (`handed`): its frame line (`handed_line`) in place of the closing sentence, then the
    handing agent's request — framed even with nothing unseen."""
    recent = unseen[-max_messages:] if max_messages > 0 else []
    lines = []
    if recent:
        lines.append(HEADER.format(channel=channel.lstrip("#")))
        lines.extend(f"{line.sender}: {cut(line.text, max_chars)}" for line in recent)
        lines.append(FOOTER)
    if handed is not None:
        lines.append(handed_line(handed))
    elif not recent:
        return text
    else:
        lines.append(CLOSING)
    lines.append(text)
    return "\n".join(lines)


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"
