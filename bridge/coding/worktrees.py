"""Git, for the threads' worktrees: every call an asyncio subprocess (`git -C FOLDER …`), never
blocking the loop, with a time limit; output read as text. Only what the bridge needs:

* `top(folder)`: the checkout a folder lies in;
* `add(top, path, branch)`: a new worktree at `path` on a new branch from the checkout's HEAD
  (an existing branch of that name — a restart that lost the row — is checked out again);
* `status(path)`: its `git status --porcelain` (empty: clean);
* `remove(top, path)`: `git worktree remove` — which git itself refuses for a dirty tree; the
  branch stays, with whatever was committed on it.
"""
from __future__ import annotations

import asyncio
import logging
import os

log = logging.getLogger(__name__)

GIT_LIMIT = 60.0  # seconds a git call may take (a worktree of a big checkout is written out)


class GitError(Exception):
    """A git call that failed; its message is git's last line, for the owner."""


async def git(folder: str, *args: str, limit: float = GIT_LIMIT) -> str:
    """Run `git -C folder args…`; its output, or GitError with git's own words."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        process = await asyncio.create_subprocess_exec(
            "git", "-C", folder, *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    except OSError as exc:
        raise GitError(f"git could not run: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(), limit)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise GitError(f"git {args[0]} took longer than {limit:g} s") from None
    if process.returncode != 0:
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        raise GitError(lines[-1].strip() if lines else f"git {args[0]} failed ({process.returncode})")
    return out.decode(errors="replace")


async def top(folder: str) -> str | None:
    """The top of the git checkout `folder` lies in, links resolved; None if it is in none."""
    if not os.path.isdir(folder):
        return None
    try:
        found = (await git(folder, "rev-parse", "--show-toplevel")).strip()
    except GitError:
        return None
    return os.path.realpath(found) if found else None


async def branch_exists(top_folder: str, branch: str) -> bool:
    try:
        await git(top_folder, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
    except GitError:
        return False
    return True


async def add(top_folder: str, path: str, branch: str) -> None:
    """A worktree at `path` on `branch`: made from HEAD, or the branch checked out if it exists."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if await branch_exists(top_folder, branch):
        await git(top_folder, "worktree", "add", path, branch)
    else:
        await git(top_folder, "worktree", "add", "-b", branch, path, "HEAD")


async def status(path: str) -> str | None:
    """`git status --porcelain` of the worktree (empty: clean); None when it is gone."""
    if not os.path.isdir(path):
        return None
    try:
        return await git(path, "status", "--porcelain")
    except GitError:
        return None


async def remove(top_folder: str, path: str) -> None:
    """Take the worktree away (git refuses a dirty one: GitError); its branch stays. One
    already gone from disk is pruned from git's list."""
    if not os.path.isdir(path):
        await git(top_folder, "worktree", "prune")
        return
    await git(top_folder, "worktree", "remove", path)
