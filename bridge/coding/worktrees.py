"""Git, for the threads' worktrees: every call an asyncio subprocess, never blocking the loop,
with a time limit; output read as text. Every call goes through `run`, which makes it safe
(coding/safe_git.py: no hook, fsmonitor, filter or other command the checkout names runs; the
git folder named by the bridge). Only what the bridge needs:

* `top(folder)`: the checkout a folder lies in;
* `add(top, path, branch)`: a new worktree at `path` on a new branch from the checkout's HEAD
  (an existing branch of that name — a restart that lost the row — is checked out again);
* `status(top, path)`: its `git status --porcelain` (empty: clean), with the worktree's git
  folder found in the checkout's own list (`admin_dir`), never through the worktree's `.git`
  file, which the agent working there can rewrite;
* `remove(top, path)`: `git worktree remove` — which git itself refuses for a dirty tree (and
  for a `.git` file that does not point back); the branch stays, with whatever was committed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass

from . import safe_git

log = logging.getLogger(__name__)

GIT_LIMIT = 60.0  # seconds a git call may take (a worktree of a big checkout is written out)


class GitError(Exception):
    """A git call that failed; its message is git's last line, for the owner."""


@dataclass(frozen=True)
class Checkout:
    """A checkout, as the bridge names it to git: its top, its git folder, the folder its
    worktrees' git folders are in (the same, but for a checkout that is itself a worktree)."""

    top: str
    git_dir: str
    common: str


async def _exec(command: list[str], env: dict[str, str], limit: float) -> str:
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
    except OSError as exc:
        raise GitError(f"git could not run: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(), limit)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise GitError(f"git took longer than {limit:g} s") from None
    if process.returncode != 0:
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        raise GitError(lines[-1].strip() if lines else f"git failed ({process.returncode})")
    return out.decode(errors="replace")


async def run(
    *args: str,
    git_dir: str | None = None,
    work_tree: str | None = None,
    folder: str | None = None,
    limit: float = GIT_LIMIT,
) -> str:
    """The one way the bridge runs git: `git args…` on the git folder `git_dir` (its config's
    driver commands read first and overridden, a conditional include refused: safe_git.py), or,
    to find a checkout, in `folder`; its output, or GitError with git's own words."""
    overrides: list[tuple[str, str]] = []
    if git_dir is not None:
        listed = await _exec(safe_git.argv(safe_git.LIST_CONFIG, git_dir), safe_git.env(os.environ), limit)
        names = safe_git.key_names(listed)
        conditional = safe_git.conditional_include(names)
        if conditional is not None:
            raise GitError(safe_git.refusal(conditional))
        overrides = safe_git.driver_overrides(names)
    return await _exec(safe_git.argv(args, git_dir, work_tree, folder), safe_git.env(os.environ, overrides), limit)


async def top(folder: str) -> str | None:
    """The top of the git checkout `folder` lies in, links resolved; None if it is in none."""
    if not os.path.isdir(folder):
        return None
    try:
        found = (await run("rev-parse", "--show-toplevel", folder=folder)).strip()
    except GitError:
        return None
    return os.path.realpath(found) if found else None


async def checkout(top_folder: str) -> Checkout:
    """The checkout at `top_folder` (the owner's: its `cwd` or `!cwd`), named for git: its
    `.git` folder; only a checkout whose `.git` is a file (itself a worktree) is asked of git."""
    dot = os.path.join(top_folder, ".git")
    if os.path.isdir(dot) and not os.path.islink(dot):
        return Checkout(top_folder, dot, dot)
    found = (
        await run("rev-parse", "--path-format=absolute", "--absolute-git-dir", "--git-common-dir", folder=top_folder)
    ).splitlines()
    if len(found) != 2:
        raise GitError(f"{top_folder} is not a git checkout")
    return Checkout(top_folder, found[0], found[1])


def admin_dir(common: str, path: str) -> str | None:
    """The git folder of the worktree at `path`, in the checkout's list (`common`/worktrees/*,
    whose `gitdir` file names the worktree's `.git`); None when it is not there."""
    folder = os.path.join(common, "worktrees")
    wanted = {os.path.normpath(os.path.join(p, ".git")) for p in (path, os.path.realpath(path))}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(folder, name, "gitdir"), encoding="utf-8", errors="replace") as f:
                named = f.read(4096).strip()
        except OSError:
            continue
        if named and os.path.normpath(named) in wanted:
            return os.path.join(folder, name)
    return None


async def git(top_folder: str, *args: str, limit: float = GIT_LIMIT) -> str:
    """`git args…` in the checkout at `top_folder` (its git folder and work tree named)."""
    where = await checkout(top_folder)
    return await run(*args, git_dir=where.git_dir, work_tree=where.top, limit=limit)


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


async def status(top_folder: str, path: str) -> str | None:
    """`git status --porcelain` of the worktree at `path` of the checkout at `top_folder`
    (empty: clean; submodules not looked into, git itself refuses to remove a worktree that
    has any); None when it is gone, from disk or from the checkout's list."""
    if not os.path.isdir(path):
        return None
    try:
        where = await checkout(top_folder)
        git_dir = admin_dir(where.common, path)
        if git_dir is None:
            return None
        return await run("status", "--porcelain", "--ignore-submodules=all", git_dir=git_dir, work_tree=path)
    except GitError:
        return None


async def prune(top_folder: str) -> None:
    """Worktrees gone from disk leave the checkout's list."""
    await git(top_folder, "worktree", "prune")


async def remove(top_folder: str, path: str) -> None:
    """Take the worktree away (git refuses a dirty one: GitError); its branch stays. One
    already gone from disk is pruned from git's list."""
    if not os.path.isdir(path):
        await prune(top_folder)
        return
    await git(top_folder, "worktree", "remove", path)
