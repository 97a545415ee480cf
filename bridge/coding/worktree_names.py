"""Names for the threads' git worktrees, and how `!worktrees` shows them. Pure.

A thread's branch is `sidekicks/<the first words of its root>-<8 hex>`: the words tell the
owner which thread it is in `git branch`; the hex is a hash of the channel and the thread's root
event, so two threads with the same first words get two branches, and the same thread always
the same name (a restart that lost its row finds the branch again). Only `a-z 0-9 -` go into
it: always a valid git ref name (`git check-ref-format`).

The worktree lies next to the checkout, in `<checkout>.worktrees/<the branch's last part>`: on
the same disk as the repository (a worktree shares its objects), where the owner finds it
beside the project, and outside the bridge's data folder, which agents may never read from
(channels/turns/agent_files.py).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

PREFIX = "sidekicks/"
WORDS = 5  # of the root's text, at most
LONGEST = 40  # characters of words in a branch name


def slug(text: str) -> str:
    """The first words of `text` as `a-z0-9` words joined by `-` ("thread" when there are none);
    mentions (`@alice`) left out: they name who answers, not what the thread is about."""
    words = re.findall(r"[a-z0-9]+", re.sub(r"@\S+", " ", text.lower()))[:WORDS]
    joined = "-".join(words)[:LONGEST].strip("-")
    return joined or "thread"


def short_id(channel_id: str, conversation: str) -> str:
    return hashlib.sha256(f"{channel_id}\n{conversation}".encode()).hexdigest()[:8]


def branch_name(root_text: str, channel_id: str, conversation: str, attempt: int = 0) -> str:
    """The thread's branch; `attempt` > 0 when that name is taken by a branch not the bridge's."""
    name = f"{PREFIX}{slug(root_text)}-{short_id(channel_id, conversation)}"
    return name if attempt == 0 else f"{name}-{attempt + 1}"


def worktree_path(top: str, branch: str) -> str:
    """Where the worktree of `branch` made from the checkout at `top` lies."""
    top = os.path.normpath(top)
    return os.path.join(
        os.path.dirname(top),
        os.path.basename(top) + ".worktrees",
        branch[len(PREFIX) :] if branch.startswith(PREFIX) else branch.replace("/", "-"),
    )


@dataclass(frozen=True)
class Shown:
    """A worktree as `!worktrees` lists it."""

    number: int
    thread: str  # a few words of the thread's root, or its event id
    branch: str
    path: str
    state: str  # "clean", "dirty: N changes", "missing"


def listing(channel: str, shown: list[Shown]) -> str:
    if not shown:
        return f"No worktrees in {channel}: an agent with `worktrees: on` gets one at a thread's first turn."
    lines = [f"Worktrees in {channel}:"]
    for item in shown:
        lines.append(f"{item.number}. {item.thread} — {item.branch} — {item.path} — {item.state}")
    lines.append("!worktrees remove N takes a clean one away (its branch stays).")
    return "\n".join(lines)


def thread_words(text: str | None, conversation: str, most: int = 40) -> str:
    """A few words naming a thread: its root's text, shortened; its event id without one."""
    text = " ".join((text or "").split())
    if not text:
        return conversation
    return f"“{text[:most]}…”" if len(text) > most else f"“{text}”"


def changes(status: str) -> int:
    """How many paths `git status --porcelain` lists (0: clean)."""
    return sum(1 for line in status.splitlines() if line.strip())
