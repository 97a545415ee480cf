"""Where the agent works (SPEC §15), end to end: real Synapse, the owner's matrix-nio client, the
real bridge in-process, the scripted agent (it writes files in its session's working directory
and logs every JSON-RPC message it receives), a temporary git repository as its `cwd`.

With `worktrees: on` each thread works in a git worktree of its own, on a branch named after
the thread, made at the thread's first turn: an edit in one thread is in neither the other's
worktree nor the main checkout, which the main timeline keeps using. `!worktrees` lists them; a
deleted thread's clean worktree goes once the owner confirms, a dirty one stays. `!cwd` moves the
agent within its roots only; the other roots are the session's additionalDirectories.

The two threads' turns run here one after the other: on this branch a channel still answers one
message at a time (turns running per conversation at once is another part of issue 29); what
is shown is that their edits never meet.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import nio

from bridge_harness import agent
from helpers import ALICE, received, say
from matrix_helpers import events_in, sync_until
from test_channels import group
from test_threads import answered, in_thread, thread_of


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def make_repo(folder: Path) -> Path:
    folder.mkdir()
    git(folder, "init", "-q")
    (folder / "README").write_text("the project\n")
    git(folder, "add", "README")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return folder


def notices(owner, room_id) -> list[dict]:
    return [e for e in events_in(owner, room_id)
            if e.get("type") == "m.room.message" and e["content"].get("msgtype") == "m.notice"]


async def notice(owner, room_id, *words: str) -> dict:
    """Once a notice with all these words has come: it."""
    def found():
        return next((e for e in notices(owner, room_id)
                     if all(w in e["content"].get("body", "") for w in words)), None)
    await sync_until(owner, lambda: found() is not None, timeout=60)
    return found()


def new_sessions(log: Path) -> list[dict]:
    return [m["params"] for m in received(log) if m.get("method") == "session/new"]


async def test_two_threads_work_in_two_worktrees_and_cwd_stays_in_the_roots(bridge_factory, tmp_path, owner):
    repo, notes = make_repo(tmp_path / "app"), tmp_path / "notes"
    notes.mkdir()
    log = tmp_path / "alice.log"
    await bridge_factory({"alice": agent("--echo-last-line", "--additional-directories", "--log", str(log),
                                         title="Alice", cwd=str(repo), roots=[str(repo), str(notes)],
                                         worktrees="on")})
    room_id = await group(owner, ALICE)

    # the main timeline works in the checkout itself; the other root is beside it
    login = await say(owner, room_id, "@alice Fix the login bug")
    await answered(owner, room_id, ALICE, 1)
    dark = await say(owner, room_id, "@alice Add a dark mode")
    await answered(owner, room_id, ALICE, 2)
    assert [(s["cwd"], s.get("additionalDirectories")) for s in new_sessions(log)] == [(str(repo), [str(notes)])]

    # a thread under each: each writes a file where its session works
    await say(owner, room_id, "@alice [[write:one.txt]]", **in_thread(login, login))
    one = (await answered(owner, room_id, ALICE, 3))[2]
    await say(owner, room_id, "@alice [[write:two.txt]]", **in_thread(dark, dark))
    two = (await answered(owner, room_id, ALICE, 4))[3]
    assert thread_of(one) == login and thread_of(two) == dark
    one_path, two_path = Path(one["final"].removeprefix("wrote ")), Path(two["final"].removeprefix("wrote "))
    tree_one, tree_two = one_path.parent, two_path.parent
    assert tree_one != tree_two and tree_one.parent == tree_two.parent == tmp_path / "app.worktrees"
    # an edit in one is in neither the other nor the main checkout
    assert one_path.is_file() and not (tree_two / "one.txt").exists() and not (repo / "one.txt").exists()
    assert two_path.is_file() and not (tree_one / "two.txt").exists() and not (repo / "two.txt").exists()
    assert git(repo, "status", "--porcelain") == ""
    # each on a branch named after its thread, in git's own list of worktrees
    branches = git(repo, "branch", "--list", "sidekicks/*", "--format=%(refname:short)").split()
    assert len(branches) == 2
    assert branches[0].startswith("sidekicks/add-a-dark-mode-") and branches[1].startswith("sidekicks/fix-the-login-bug-")
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {tree_one}\n" in listed and f"worktree {tree_two}\n" in listed
    # each thread's session opened in its worktree, told so in the thread
    sessions = new_sessions(log)
    assert [(s["cwd"], s.get("additionalDirectories")) for s in sessions[1:]] == [
        (str(tree_one), [str(notes)]), (str(tree_two), [str(notes)])]
    said = await notice(owner, room_id, "Alice works in this thread on branch sidekicks/fix-the-login-bug-")
    assert thread_of(said) == login and str(tree_one) in said["content"]["body"]

    # !worktrees: thread, branch, path, clean or dirty
    await say(owner, room_id, "!worktrees")
    listing = (await notice(owner, room_id, "Worktrees in #general:"))["content"]["body"].splitlines()
    assert listing[1].startswith("1. “@alice Fix the login bug” — sidekicks/fix-the-login-bug-")
    assert listing[1].endswith(f"— {tree_one} — dirty: 1 uncommitted changes")
    assert listing[2].endswith(f"— {tree_two} — dirty: 1 uncommitted changes")

    # a deleted thread: a dirty worktree stays; a clean one goes once the owner confirms
    assert isinstance(await owner.room_redact(room_id, login), nio.RoomRedactResponse)
    await notice(owner, room_id, "The deleted thread's worktree 1", "uncommitted changes: it stays")
    two_path.unlink()  # the owner discards the second thread's change, then deletes the thread
    assert isinstance(await owner.room_redact(room_id, dark), nio.RoomRedactResponse)
    await notice(owner, room_id, "The thread of worktree 2", "type: !worktrees remove 2 confirm")
    assert tree_two.is_dir()  # nothing without the owner's word
    await say(owner, room_id, "!worktrees remove 2 confirm")
    await notice(owner, room_id, "Removed worktree 2")
    assert not tree_two.exists() and tree_one.is_dir()
    assert git(repo, "branch", "--list", "sidekicks/*", "--format=%(refname:short)").split() == branches  # kept

    # !cwd: refused outside the roots, in one line naming them; inside, the next new session there
    await say(owner, room_id, "!cwd /etc")
    refused = await notice(owner, room_id, "/etc is not in them")
    assert refused["content"]["body"] == (f"Alice may work only in {repo}, {notes} (agents.<name>.roots); "
                                          "/etc is not in them.")
    await say(owner, room_id, "!cwd ../notes")
    await notice(owner, room_id, f"Alice works in {notes} here from its next new session.")
    await say(owner, room_id, "@alice [[session-cwd]]")
    moved = await answered(owner, room_id, ALICE, 5)
    assert moved[4]["final"] == str(notes) and thread_of(moved[4]) == ""
    assert (new_sessions(log)[-1]["cwd"], new_sessions(log)[-1].get("additionalDirectories")) == (str(notes), [str(repo)])
