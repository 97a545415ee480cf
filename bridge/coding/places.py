"""Where a conversation's agent works: pure decisions, no I/O but reading paths.

A new session gets one working directory, chosen in this order
(docs/architecture.md "Conversations and threads"):

1. the thread's git worktree, for an agent with `worktrees: on` in a thread (coding/worktrees.py
   makes it; the same folder below the checkout's top as the agent's own, inside the worktree);
2. the folder the owner chose for the agent in the channel with `!cwd`;
3. the configured `cwd` (none: wherever the bridge runs).

`!cwd PATH` is read as a shell would (`~` expanded, relative to the agent's current folder),
every link resolved, and taken only inside one of the agent's `roots:` — an owner's typo or a
link out of the roots never moves an agent somewhere the config does not allow. The folder
kept is resolved and checked again each time a session opens there (`recheck`): one swapped
for a link out of the roots since `!cwd` took it is not opened (the configured cwd is, and
the owner is told, `moved_out`). The roots that
do not hold the chosen folder are the session's `additionalDirectories`, where the agent
announces it takes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Place:
    """A session's working directory (None: the agent's own default) and its other roots."""

    cwd: str | None
    additional: tuple[str, ...] = ()


def inside(path: str, folder: str) -> bool:
    """`path` is `folder` or below it (both absolute, links resolved by the caller)."""
    path, folder = os.path.normpath(path), os.path.normpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def root_of(path: str, roots: tuple[str, ...]) -> str | None:
    """The root `path` lies in (the innermost, if roots nest), or None."""
    holding = [root for root in roots if inside(path, root)]
    return max(holding, key=len) if holding else None


def resolve(current: str, wanted: str, home: str | None = None) -> str:
    """The absolute folder `!cwd wanted` names from `current`: `~` expanded, relative to
    `current`, `..` and links resolved (realpath: a link cannot lead out of the roots unseen)."""
    wanted = wanted.strip()
    if wanted == "~" or wanted.startswith("~/"):
        wanted = (home if home is not None else os.path.expanduser("~")) + wanted[1:]
    return os.path.realpath(os.path.join(current, wanted))


def recheck(chosen: str, roots: tuple[str, ...]) -> tuple[str | None, str]:
    """The folder `!cwd` chose, resolved again as a session opens: (its real path, "") while it
    is a folder inside the roots; else (None, "") when it is gone (the configured cwd, nothing
    to say), or (None, its real path) when it now leads out of the roots."""
    real = os.path.realpath(chosen)
    if not os.path.isdir(real):
        return None, ""
    if root_of(real, roots) is None:
        return None, real
    return real, ""


def moved_out(title: str, chosen: str, real: str, fallback: str | None) -> str:
    """The one line said when the `!cwd` folder leads out of the roots as a session opens."""
    where = fallback or "its default folder"
    leads = f"now leads to {real}, " if real != chosen else "is "
    return (
        f"{title}: the folder chosen with !cwd, {chosen}, {leads}outside its roots "
        f"(agents.<name>.roots): this session opens in {where} instead."
    )


def base_dir(configured: str | None, chosen: str | None) -> str | None:
    """The folder the agent works in in this channel, worktrees aside: `!cwd`'s, else the config's."""
    return chosen or configured


def in_worktree(base: str, top: str, worktree: str) -> str:
    """The agent's folder inside a thread's worktree: `base` is at the same place below the
    checkout's `top` as the answer is below `worktree`."""
    below = os.path.relpath(base, top)
    return worktree if below == "." else os.path.join(worktree, below)


def additional(cwd: str | None, roots: tuple[str, ...], origin: str | None = None) -> tuple[str, ...]:
    """The roots a session gets beside its working directory: every root not holding it (nor
    `origin`, the folder a worktree was made from: the worktree stands for that root)."""
    if cwd is None:
        return ()
    return tuple(root for root in roots if not inside(cwd, root) and not (origin is not None and inside(origin, root)))


def refusal(title: str, wanted: str, roots: tuple[str, ...]) -> str:
    """The one line a `!cwd` outside the roots gets."""
    if not roots:
        return f"{title} has no folders to work in (set agents.<name>.roots or cwd in the config)."
    return f"{title} may work only in {', '.join(roots)} (agents.<name>.roots); {wanted} is not in them."
