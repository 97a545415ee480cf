"""Bridge commands as text: parsing `!name args`, and the words of help, states and command lists.

Pure functions, no Matrix and no store (tests/unit/channels/rules/test_commands_parse.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .help_text import channel_full_help, full_help

if TYPE_CHECKING:
    from store import Channel

CONFIRM = "confirm"

GREETING = (
    "Hi! I am the Sidekicks bridge: the AI agents on this computer are Matrix users here. Talk to "
    "one in a direct chat with it (!dm AGENT), or to several in a channel (!new NAME AGENT...): "
    "mention one (@name hello) and it answers. !help says what you can do here."
)

HELP = full_help().body  # `!help all` in the bot's DM (help_text.py)
CHANNEL_HELP = channel_full_help().body  # `!help all` in a channel


@dataclass(frozen=True)
class Command:
    name: str  # lower case, without the "!"
    args: tuple[str, ...]  # shell-like words: "a b" in quotes is one word


_COMMAND = re.compile(r"!([A-Za-z][\w-]*)(?:\s+(.*))?\Z", re.DOTALL)


def parse(body: str) -> Command | None:
    """`!name args...` → Command; anything else (`! hi`, `!!`, plain text) → None."""
    match = _COMMAND.match(body.strip())
    if match is None:
        return None
    rest = (match.group(2) or "").strip()
    try:
        args = shlex.split(rest)
    except ValueError:  # an unbalanced quote: plain words
        args = rest.split()
    return Command(match.group(1).lower(), tuple(args))


def rest_of(body: str) -> str:
    """The words after `!name`, as typed (quotes and line breaks kept): `!steer`'s text."""
    match = _COMMAND.match(body.strip())
    return (match.group(2) or "").strip() if match is not None else ""


def queue_listing(jobs: Iterable[tuple[str, str]], cut: int = 80) -> str:
    """`!queue`: the turns waiting in a conversation ((agent, text), in order), numbered."""
    jobs = list(jobs)
    if not jobs:
        return "Nothing waits here."
    lines = ["Waiting here (!drop N removes one, !steer TEXT steers the running answer):"]
    for number, (agent, text) in enumerate(jobs, 1):
        text = " ".join(text.split())
        lines.append(f"  {number}. {agent}: {text if len(text) <= cut else text[: cut - 1] + '…'}")
    return "\n".join(lines)


THREADS_ON = "on"  # the stored value of a channel that opens threads (store/keys.py `threads`)


def opens_threads(stored: str | None) -> bool:
    """The channel's stored `!threads` setting: on, or off (absent, the default)."""
    return stored == THREADS_ON


def on_off(command: str, args: Iterable[str]) -> bool | None:
    """`!COMMAND on|off` arguments → True (`on`), False (`off`), None (nothing: show the
    setting). Anything else raises ValueError with the usage line."""
    words = [w.lower() for w in args]
    if not words:
        return None
    if len(words) == 1 and words[0] in ("on", "off"):
        return words[0] == "on"
    raise ValueError(f"Usage: !{command} on, !{command} off, or !{command} to see the setting.")


def threads_switch(args: Iterable[str]) -> bool | None:
    """`!threads` arguments (`on_off`)."""
    return on_off("threads", args)


def threads_state(on: bool) -> str:
    """The `!threads` setting in words."""
    if on:
        return (
            "Threads are on here: each message agents answer gets its answers in a thread "
            "under it (!threads off: answers in the main timeline)."
        )
    return (
        "Threads are off here: agents answer in the main timeline, or in the thread a message "
        "was written in (!threads on: a thread under each message they answer)."
    )


HANDOFFS_OFF = "off"  # the stored value of a channel whose agents cannot hand off (store/keys.py `handoffs`)


def handoffs_on(stored: str | None) -> bool:
    """The channel's stored `!handoffs` setting: on (absent, the default), or off."""
    return stored != HANDOFFS_OFF


def handoffs_switch(args: Iterable[str]) -> bool | None:
    """`!handoffs` arguments (`on_off`)."""
    return on_off("handoffs", args)


def handoffs_state(on: bool) -> str:
    """The `!handoffs` setting in words."""
    if on:
        return (
            "Hand-offs are on here: an agent may hand the next turn to another member with its "
            "`handoff` tool (!handoffs off: only you choose who answers)."
        )
    return "Hand-offs are off here: agents cannot hand work to each other (!handoffs on: they can)."


def resolve_agent(token: str, aliases: dict[str, str]) -> str | None:
    """`alice`, `@alice`, `Alice`, `@sk_alice:localhost` → "alice" (None if no such agent)."""
    name = token.strip().lstrip("@").split(":", 1)[0].lower()
    return aliases.get(name)


AGENTS_USAGE = "Usage: !agents add ID [--cwd DIR] (an id of `sidekicks agents search`), or !agents remove NAME."


def agents_change(args: tuple[str, ...]) -> tuple[str, str, str | None] | str:
    """`!agents add ID [--cwd DIR]` → ("add", ID, DIR or None); `!agents remove NAME` →
    ("remove", NAME, None); anything else: the usage line to say."""
    if len(args) == 2 and args[0] in ("add", "remove"):
        return args[0], args[1], None
    if len(args) == 4 and args[0] == "add" and args[2] == "--cwd":
        return "add", args[1], args[3]
    return AGENTS_USAGE


def split_delete(args: Iterable[str]) -> tuple[str, bool]:
    """`!delete` arguments → (channel name, confirmed): the word `confirm` last confirms."""
    words = list(args)
    confirmed = bool(words) and words[-1].lower() == CONFIRM
    if confirmed:
        words = words[:-1]
    return " ".join(words).strip(), confirmed


SESSION_COMMANDS = ("sessions", "resume", "reset", "fork")
SESSION_USAGE = {
    "sessions": "!sessions [AGENT], or !sessions [AGENT] delete N",
    "resume": "!resume [AGENT] N",
    "reset": "!reset [AGENT]",
    "fork": "!fork [AGENT]",
}


class BadSessionArgs(ValueError):
    """The words of a session command do not fit it: the message is its usage."""


@dataclass(frozen=True)
class SessionArgs:
    agent: str | None  # the word naming an agent, as typed (`alice`, `@alice`), or None
    number: int | None  # `!resume`'s N (from 1), else None
    delete: bool = False  # `!sessions [AGENT] delete N`


def session_args(name: str, args: Iterable[str]) -> SessionArgs:
    """`!sessions [AGENT]`, `!reset [AGENT]`, `!fork [AGENT]`, `!resume [AGENT] N` (N before
    or after the agent) → SessionArgs; BadSessionArgs (its usage line) for anything else."""
    words = list(args)
    delete = name == "sessions" and any(w.lower() == "delete" for w in words)
    if delete:
        words = [w for w in words if w.lower() != "delete"]
    numbers = [w for w in words if w.isdigit()]
    others = [w for w in words if not w.isdigit()]
    wanted = 1 if name == "resume" or delete else 0
    if len(numbers) != wanted or len(others) > 1 or (numbers and int(numbers[0]) < 1):
        raise BadSessionArgs(f"Usage: {SESSION_USAGE[name]}" + (" (N from !sessions)" if wanted else ""))
    return SessionArgs(others[0] if others else None, int(numbers[0]) if numbers else None, delete)


def find_channels(channels: Iterable[Channel], query: str) -> list[Channel]:
    """Channels named `query` (case-insensitive, `#` optional), or the one in room `query`."""
    query = query.strip()
    channels = list(channels)
    by_room = [c for c in channels if c.room_id == query]
    if by_room:
        return by_room
    wanted = query.lstrip("#").casefold()
    return [c for c in channels if c.name.casefold() == wanted]


def describe_state(state: str, answering_in: str | None = None) -> str:
    """Pool.state() in words (docs/commands.md: `!agents` says stopped / ready / answering
    where / waiting); `answering_in` is a place (room_names.py: `#general`, `your direct chat`)."""
    if state == "busy" or (answering_in and state != "waiting"):
        return f"answering in {answering_in}" if answering_in else "answering"
    return {"stopped": "stopped", "starting": "starting", "ready": "ready", "waiting": "waiting for a free slot"}.get(
        state, state
    )


def format_commands(agent: str, commands: list[dict[str, Any]] | None, several: bool) -> list[str]:
    """Lines for one agent's commands: `/agent:name hint — description` with several members."""
    if not commands:
        return [f"{agent}: no commands"]
    lines = [f"{agent}:"]
    for command in commands:
        name = str(command.get("name", "")).lstrip("/")
        if not name:
            continue
        hint = (command.get("input") or {}).get("hint") if isinstance(command.get("input"), dict) else None
        typed = f"/{agent}:{name}" if several else f"/{name}"
        if hint:
            typed += f" <{hint}>"
        description = command.get("description")
        lines.append(f"  {typed} — {description}" if description else f"  {typed}")
    return lines
