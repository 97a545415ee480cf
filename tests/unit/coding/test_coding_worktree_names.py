"""The threads' branch and worktree names (coding/worktree_names.py): valid git refs, named
after the thread, unique per thread, next to the checkout; how `!worktrees` lists them."""

import subprocess

import pytest

from bridge.coding.worktree_names import PREFIX, Shown, branch_name, changes, listing, slug, thread_words, worktree_path


def test_a_branch_is_named_after_the_first_words_of_the_threads_root():
    name = branch_name("Fix the LOGIN bug, please! And more words here", "c1", "$root")
    assert name.startswith(PREFIX + "fix-the-login-bug-please-") and len(name.rsplit("-", 1)[1]) == 8
    assert branch_name("Fix the login bug please", "c1", "$root") == name  # the same thread: the same name
    assert branch_name("Fix the login bug please", "c1", "$other") != name  # another thread: its own
    assert branch_name("Fix the login bug please", "c2", "$root") != name
    assert branch_name("x", "c1", "$root", attempt=1).endswith("-2")
    assert branch_name("@alice @sk_bob:localhost fix it", "c1", "$root").startswith(PREFIX + "fix-it-")


@pytest.mark.parametrize(
    "text", ["", "!!! ???", "../../etc/passwd", "a.lock", "@{x} ~^:?*[\\", "é" * 50, "word " * 40, "-dash-", ".hidden"]
)
def test_every_branch_name_is_a_valid_git_ref(text):
    name = branch_name(text, "c", "$e")
    assert slug(text) and len(name) < 80
    assert subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True).returncode == 0, name


def test_the_worktree_lies_next_to_the_checkout():
    assert worktree_path("/home/me/app", "sidekicks/fix-it-0123abcd") == "/home/me/app.worktrees/fix-it-0123abcd"
    assert worktree_path("/home/me/app/", "other/x") == "/home/me/app.worktrees/other-x"


def test_the_listing_shows_thread_branch_path_and_state():
    text = listing(
        "#dev",
        [
            Shown(1, thread_words("Fix the login bug", "$r"), "sidekicks/fix-1", "/a", "clean"),
            Shown(3, thread_words(None, "$r2"), "sidekicks/x-2", "/b", "dirty: 2 uncommitted changes"),
        ],
    )
    assert text.splitlines()[:3] == [
        "Worktrees in #dev:",
        "1. “Fix the login bug” — sidekicks/fix-1 — /a — clean",
        "3. $r2 — sidekicks/x-2 — /b — dirty: 2 uncommitted changes",
    ]
    assert listing("#dev", []).startswith("No worktrees in #dev")
    assert thread_words("a " * 40, "$r").endswith("…”")


def test_changes_count_the_lines_of_git_status():
    assert changes("") == 0 and changes(" M a.py\n?? b.py\n") == 2
