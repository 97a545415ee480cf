"""Git for the threads' worktrees (coding/worktrees.py), on a real temporary repository: made
on a new branch from HEAD (or the branch again), clean or dirty, removed only when clean."""

import os

import pytest
from git_traps import plant, plant_conditional

from bridge.coding import worktrees as git


async def test_the_top_of_a_checkout_and_none_outside(repo, tmp_path):
    assert await git.top(str(repo / "src")) == str(repo)
    assert await git.top(str(tmp_path)) is None and await git.top(str(tmp_path / "missing")) is None


async def test_a_worktree_on_its_own_branch_clean_then_dirty_then_removed(repo, tmp_path):
    path = str(tmp_path / "app.worktrees" / "t-1")
    await git.add(str(repo), path, "sidekicks/t-1")
    assert (tmp_path / "app.worktrees" / "t-1" / "README").read_text() == "hello\n"
    assert await git.branch_exists(str(repo), "sidekicks/t-1")
    assert await git.status(str(repo), path) == ""
    (tmp_path / "app.worktrees" / "t-1" / "new.txt").write_text("x")
    assert await git.status(str(repo), path) == "?? new.txt\n"
    assert not (repo / "new.txt").exists()  # the main checkout is untouched
    with pytest.raises(git.GitError):  # git keeps a dirty tree
        await git.remove(str(repo), path)
    os.remove(os.path.join(path, "new.txt"))
    await git.remove(str(repo), path)
    assert not os.path.exists(path) and await git.status(str(repo), path) is None
    assert await git.branch_exists(str(repo), "sidekicks/t-1")  # the branch stays
    await git.add(str(repo), path, "sidekicks/t-1")  # made again: on the branch it had
    assert await git.status(str(repo), path) == ""


async def test_a_failing_git_call_says_gits_own_words(repo, tmp_path):
    await git.add(str(repo), str(tmp_path / "one"), "sidekicks/same")
    with pytest.raises(git.GitError, match="sidekicks/same"):  # checked out in "one" already
        await git.add(str(repo), str(tmp_path / "two"), "sidekicks/same")


async def test_git_runs_nothing_the_checkout_names(repo, tmp_path):
    """A hook, fsmonitor and filters planted in the checkout: making a worktree, its status and
    its removal run none of them (each would leave a marker file)."""
    marker = tmp_path / "ran"
    plant(repo, marker)
    path = str(tmp_path / "app.worktrees" / "t-1")
    await git.add(str(repo), path, "sidekicks/t-1")
    assert (tmp_path / "app.worktrees" / "t-1" / "README").read_text() == "hello\n"  # no smudge
    assert await git.status(str(repo), path) == ""
    (tmp_path / "app.worktrees" / "t-1" / "README").write_text("edited\n")
    assert await git.status(str(repo), path) == " M README\n"
    (tmp_path / "app.worktrees" / "t-1" / "README").write_text("hello\n")
    await git.remove(str(repo), path)
    assert not os.path.exists(path)
    assert await git.top(str(repo / "src")) == str(repo)
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == []
    # the planted commands do run when git is asked without the bridge's care (the test can fail)
    import subprocess

    subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], check=True, capture_output=True)
    # (the fsmonitor's answer may spare git a look at README: the clean filter, asked alone)
    status = ["git", "-C", str(repo), "-c", "core.fsmonitor=false", "status", "--porcelain"]
    subprocess.run(status, check=True, capture_output=True)
    assert (tmp_path / "ran-fsmonitor").exists() and (tmp_path / "ran-clean").exists()


@pytest.mark.parametrize("condition", ["gitdir:**/worktrees/**", "onbranch:sidekicks/**"])
async def test_a_filter_defined_under_a_condition_never_runs(repo, tmp_path, condition):
    """`[includeIf "<condition>"]` naming a smudge filter, false from the checkout's git folder
    and true for `worktree add`'s own child git: the worktree is refused in one line, and the
    filter does not run (docs/sandbox.md "Git")."""
    marker = tmp_path / "ran"
    plant_conditional(repo, marker, condition)
    path = str(tmp_path / "app.worktrees" / "t-1")
    with pytest.raises(git.GitError, match="conditional include"):
        await git.add(str(repo), path, "sidekicks/t-1")
    assert not (tmp_path / "ran-cond").exists() and not os.path.exists(path)
    # without the bridge's care the child git does run it (the test can fail)
    import subprocess

    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(
        ["git", "-C", str(repo), "worktree", "add", "-b", "sidekicks/t-2", str(tmp_path / "t-2")],
        env=env,
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "ran-cond").exists()


async def test_a_worktrees_rewritten_git_file_is_not_followed(repo, tmp_path):
    """The worktree's `.git` file rewritten to point at another repository: the bridge names
    the worktree's git folder from the checkout's own list and sees the real state."""
    import subprocess

    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True, capture_output=True)
    path = tmp_path / "app.worktrees" / "t-1"
    await git.add(str(repo), str(path), "sidekicks/t-1")
    (path / "new.txt").write_text("x")
    (path / ".git").write_text(f"gitdir: {other / '.git'}\n")
    assert await git.status(str(repo), str(path)) == "?? new.txt\n"  # followed, it would list README too
    followed = subprocess.run(["git", "-C", str(path), "status", "--porcelain"], capture_output=True, text=True)
    assert "README" in followed.stdout
    with pytest.raises(git.GitError):  # git itself will not remove a worktree whose .git points elsewhere
        await git.remove(str(repo), str(path))
    assert path.is_dir()


async def test_a_worktrees_git_folder_is_found_in_the_checkouts_own_list(repo, tmp_path):
    path = tmp_path / "app.worktrees" / "t-1"
    await git.add(str(repo), str(path), "sidekicks/t-1")
    assert git.admin_dir(str(repo / ".git"), str(path)) == str(repo / ".git" / "worktrees" / "t-1")
    assert git.admin_dir(str(repo / ".git"), str(tmp_path / "elsewhere")) is None
    assert git.admin_dir(str(tmp_path / "no-checkout"), str(path)) is None
    assert await git.status(str(repo), str(tmp_path / "app")) is None  # a folder git does not list: none
