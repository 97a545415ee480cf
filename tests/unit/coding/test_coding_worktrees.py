"""Git for the threads' worktrees (coding/worktrees.py), on a real temporary repository: made
on a new branch from HEAD (or the branch again), clean or dirty, removed only when clean."""
import os

import pytest

from bridge.coding import worktrees as git


async def test_the_top_of_a_checkout_and_none_outside(repo, tmp_path):
    assert await git.top(str(repo / "src")) == str(repo)
    assert await git.top(str(tmp_path)) is None and await git.top(str(tmp_path / "missing")) is None


async def test_a_worktree_on_its_own_branch_clean_then_dirty_then_removed(repo, tmp_path):
    path = str(tmp_path / "app.worktrees" / "t-1")
    await git.add(str(repo), path, "sidekicks/t-1")
    assert (tmp_path / "app.worktrees" / "t-1" / "README").read_text() == "hello\n"
    assert await git.branch_exists(str(repo), "sidekicks/t-1")
    assert await git.status(path) == ""
    (tmp_path / "app.worktrees" / "t-1" / "new.txt").write_text("x")
    assert await git.status(path) == "?? new.txt\n"
    assert not (repo / "new.txt").exists()  # the main checkout is untouched
    with pytest.raises(git.GitError):   # git keeps a dirty tree
        await git.remove(str(repo), path)
    os.remove(os.path.join(path, "new.txt"))
    await git.remove(str(repo), path)
    assert not os.path.exists(path) and await git.status(path) is None
    assert await git.branch_exists(str(repo), "sidekicks/t-1")  # the branch stays
    await git.add(str(repo), path, "sidekicks/t-1")  # made again: on the branch it had
    assert await git.status(path) == ""


async def test_a_failing_git_call_says_gits_own_words(repo, tmp_path):
    await git.add(str(repo), str(tmp_path / "one"), "sidekicks/same")
    with pytest.raises(git.GitError, match="sidekicks/same"):  # checked out in "one" already
        await git.add(str(repo), str(tmp_path / "two"), "sidekicks/same")
