"""Where the agent works (docs/architecture.md "Conversations and threads"), end to end: real
Synapse, the owner's matrix-nio client, the real bridge in-process, the scripted agent (it writes
files in its session's working directory and logs every JSON-RPC message it receives), a temporary
git repository as its `cwd`.

With `worktrees: on` each thread works in a git worktree of its own, on a branch named after
the thread, made at the thread's first turn: an edit in one thread is in neither the other's
worktree nor the main checkout, which the main timeline keeps using. `!worktrees` lists them; a
deleted thread's clean worktree goes once the owner confirms, a dirty one stays. `!cwd` moves the
agent within its roots only; the other roots are the session's additionalDirectories.

The first test's two threads answer one after the other; in another, two agents edit two
worktrees at the same moment (one agent answers one prompt at a time,
docs/architecture.md "Who answers"): alice is held mid-answer in one thread while bob writes in the
other, and their edits never meet. An agent posts the files of the folder its session works in
(docs/SECURITY.md "What an agent cannot do"): a thread's session those of its worktree, not those of
the main checkout.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nio
from bridge_harness import agent, answers_in, wait_until
from helpers import ALICE, BOB, answered, in_thread, is_final, received, say, thread_of
from matrix_helpers import events_in, notice_events, sync_until
from test_channels import group
from test_conversations_parallel import answer_to
from test_matrix_mcp import mcp_agent


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def make_repo(folder: Path) -> Path:
    folder.mkdir()
    git(folder, "init", "-q")
    (folder / "README").write_text("the project\n")
    git(folder, "add", "README")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return folder


async def notice(owner, room_id, *words: str) -> dict:
    """Once a notice with all these words has come: it."""

    def found():
        return next(
            (e for e in notice_events(owner, room_id) if all(w in e["content"].get("body", "") for w in words)), None
        )

    await sync_until(owner, lambda: found() is not None, timeout=60)
    return found()


def new_sessions(log: Path) -> list[dict]:
    return [m["params"] for m in received(log) if m.get("method") == "session/new"]


async def test_two_threads_work_in_two_worktrees_and_cwd_stays_in_the_roots(bridge_factory, tmp_path, owner):
    repo, notes = make_repo(tmp_path / "app"), tmp_path / "notes"
    notes.mkdir()
    log = tmp_path / "alice.log"
    await bridge_factory(
        {
            "alice": agent(
                "--echo-last-line",
                "--additional-directories",
                "--log",
                str(log),
                title="Alice",
                cwd=str(repo),
                roots=[str(repo), str(notes)],
                worktrees="on",
            )
        }
    )
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
    assert branches[0].startswith("sidekicks/add-a-dark-mode-") and branches[1].startswith(
        "sidekicks/fix-the-login-bug-"
    )
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {tree_one}\n" in listed and f"worktree {tree_two}\n" in listed
    # each thread's session opened in its worktree, told so in the thread
    sessions = new_sessions(log)
    assert [(s["cwd"], s.get("additionalDirectories")) for s in sessions[1:]] == [
        (str(tree_one), [str(notes)]),
        (str(tree_two), [str(notes)]),
    ]
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
    assert refused["content"]["body"] == (
        f"Alice may work only in {repo}, {notes} (agents.<name>.roots); /etc is not in them."
    )
    await say(owner, room_id, "!cwd ../notes")
    await notice(owner, room_id, f"Alice works in {notes} here from its next new session.")
    await say(owner, room_id, "@alice [[session-cwd]]")
    moved = await answered(owner, room_id, ALICE, 5)
    assert moved[4]["final"] == str(notes) and thread_of(moved[4]) == ""
    assert (new_sessions(log)[-1]["cwd"], new_sessions(log)[-1].get("additionalDirectories")) == (
        str(notes),
        [str(repo)],
    )


HOSTILE = Path(__file__).resolve().parents[1] / "agents" / "hostile_agent.py"


async def final_answer(owner, room_id, sender, *words: str) -> dict:
    """Once `sender` has a finished answer with all these words: it (edits applied)."""

    def found():
        return next(
            (
                a
                for a in answers_in(events_in(owner, room_id), sender)
                if a["msgtype"] != "m.notice" and is_final(a) and all(w in a["body"] for w in words)
            ),
            None,
        )

    await sync_until(owner, lambda: found() is not None, timeout=60)
    return found()


def first_sent(owner, room_id, event_id) -> dict:
    return next(e for e in events_in(owner, room_id) if e.get("event_id") == event_id)


def files_posted(owner, room_id) -> list[dict]:
    return [
        e
        for e in events_in(owner, room_id)
        if e.get("type") == "m.room.message" and e["content"].get("msgtype") == "m.file"
    ]


async def test_a_thread_posts_the_files_of_its_worktree_not_those_of_the_main_checkout(bridge_factory, tmp_path, owner):
    repo = make_repo(tmp_path / "app")
    (repo / "main-only.txt").write_text("the main checkout's, not the thread's\n")  # untracked: not in a worktree
    # alice calls the bridge's `send_file` MCP tool; bob answers with resource_links to files
    await bridge_factory(
        {
            "alice": mcp_agent(tmp_path / "alice.log", repo, worktrees="on"),
            "bob": {"command": [sys.executable, str(HOSTILE)], "title": "Bob", "cwd": str(repo), "worktrees": "on"},
        }
    )
    room_id = await group(owner, ALICE, BOB)
    root = await say(owner, room_id, "@alice Draw the diagram")
    await final_answer(owner, room_id, ALICE, "echo: @alice Draw the diagram")
    await say(owner, room_id, "@alice in the thread", **in_thread(root, root))
    made = await notice(owner, room_id, "Alice works in this thread on branch")
    tree = Path(made["content"]["body"].split("in its own worktree: ", 1)[1])
    await final_answer(owner, room_id, ALICE, "echo: @alice in the thread")
    assert tree.parent == tmp_path / "app.worktrees" and not (tree / "main-only.txt").exists()
    (tree / "diagram.txt").write_text("the thread's diagram\n")

    # the thread's session posts its worktree's file (a relative path is read there), not the checkout's
    await say(owner, room_id, '@alice [[tool:send_file {"path": "diagram.txt"}]]', **in_thread(root, root))
    posted = await final_answer(owner, room_id, ALICE, "send_file: Posted diagram.txt")
    await say(
        owner, room_id, '@alice [[tool:send_file {"path": "%s"}]]' % (repo / "main-only.txt"), **in_thread(root, root)
    )
    refused = await final_answer(owner, room_id, ALICE, "send_file error:", "main-only.txt")
    assert "outside the agent's working directory" in refused["body"]
    assert thread_of(first_sent(owner, room_id, posted["event_id"])) == root

    # an answer's resource_link goes through the same gate: the worktree's file is posted
    await say(
        owner,
        room_id,
        f"@bob [[link:file://{tree / 'diagram.txt'}]] [[link:file://{repo / 'main-only.txt'}]]",
        **in_thread(root, root),
    )
    links = await final_answer(owner, room_id, BOB, "links sent")
    assert "[file: main-only.txt] could not be posted: it is outside the agent's working directory" in links["body"]
    assert "diagram.txt] could not be posted" not in links["body"]
    await sync_until(owner, lambda: len(files_posted(owner, room_id)) == 2, timeout=60)
    files = files_posted(owner, room_id)
    assert [(f["sender"], f["content"]["body"], thread_of(f)) for f in files] == [
        (ALICE, "diagram.txt", root),
        (BOB, "diagram.txt", root),
    ]

    # the main timeline works in the checkout: there main-only.txt is the agent's to post
    await say(owner, room_id, '@alice [[tool:send_file {"path": "main-only.txt"}]]')
    mine = await final_answer(owner, room_id, ALICE, "send_file: Posted main-only.txt")
    assert thread_of(first_sent(owner, room_id, mine["event_id"])) == ""
    await sync_until(owner, lambda: len(files_posted(owner, room_id)) == 3, timeout=60)
    assert [f["content"]["body"] for f in files_posted(owner, room_id)] == [
        "diagram.txt",
        "diagram.txt",
        "main-only.txt",
    ]


async def test_two_agents_edit_two_worktrees_at_once_in_two_threads(bridge_factory, tmp_path, owner):
    repo = make_repo(tmp_path / "app")
    trees = tmp_path / "app.worktrees"
    h1, h2 = tmp_path / "H1", tmp_path / "H2"
    await bridge_factory(
        {
            "alice": agent(title="Alice", cwd=str(repo), worktrees="on"),
            "bob": agent(title="Bob", cwd=str(repo), worktrees="on"),
        }
    )
    room_id = await group(owner, ALICE, BOB)
    t1 = await say(owner, room_id, "@alice Fix the login bug")
    await final_answer(owner, room_id, ALICE, "Fix the login bug")
    t2 = await say(owner, room_id, "@bob Add a dark mode")
    await final_answer(owner, room_id, BOB, "Add a dark mode")

    # thread 1: alice writes one.txt in its worktree, then holds her answer after its first part
    asked1 = await say(owner, room_id, f"@alice [[write:one.txt]] [[hold:{h1}]]", **in_thread(t1, t1))
    await wait_until(lambda: list(trees.glob("*/one.txt")), what="one.txt in thread 1's worktree")
    # thread 2, while alice is still held: bob writes two.txt in another worktree
    asked2 = await say(owner, room_id, f"@bob [[write:two.txt]] [[hold:{h2}]]", **in_thread(t2, t2))
    await wait_until(lambda: list(trees.glob("*/two.txt")), what="two.txt in thread 2's worktree")
    assert not h1.exists()
    (one,), (two,) = list(trees.glob("*/one.txt")), list(trees.glob("*/two.txt"))
    tree1, tree2 = one.parent, two.parent
    assert tree1 != tree2
    assert not (tree2 / "one.txt").exists() and not (tree1 / "two.txt").exists()
    assert not (repo / "one.txt").exists() and not (repo / "two.txt").exists()
    branch1, branch2 = (git(tree, "branch", "--show-current").strip() for tree in (tree1, tree2))
    assert branch1 != branch2
    assert branch1.startswith("sidekicks/fix-the-login-bug-") and branch2.startswith("sidekicks/add-a-dark-mode-")
    # alice's answer is still held in thread 1: both edits happened while hers was running
    held = answer_to(owner, room_id, ALICE, asked1)
    assert held is None or not is_final(held)

    h1.touch()
    h2.touch()

    def done(sender, asked) -> bool:
        found = answer_to(owner, room_id, sender, asked)
        return found is not None and is_final(found)

    await sync_until(owner, lambda: done(ALICE, asked1) and done(BOB, asked2), timeout=60)
    done1, done2 = answer_to(owner, room_id, ALICE, asked1), answer_to(owner, room_id, BOB, asked2)
    assert done1["body"] == f"wrote {one}" and done2["body"] == f"wrote {two}"
    assert thread_of(first_sent(owner, room_id, done1["event_id"])) == t1
    assert thread_of(first_sent(owner, room_id, done2["event_id"])) == t2
