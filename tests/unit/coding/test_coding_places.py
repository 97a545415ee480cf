"""Where a conversation's agent works (coding/places.py): `!cwd` read as a shell would, links
resolved, only inside the roots; a worktree keeps the agent's place below the checkout; the
other roots become additionalDirectories."""

import os

from bridge.coding.places import (
    additional,
    base_dir,
    in_worktree,
    inside,
    moved_out,
    recheck,
    refusal,
    resolve,
    root_of,
)


def test_inside_is_the_folder_or_below_never_a_prefix_of_a_name():
    assert inside("/code", "/code") and inside("/code/a/b", "/code") and inside("/code/a", "/code/")
    assert not inside("/codebase", "/code") and not inside("/", "/code")


def test_the_innermost_root_holding_a_path():
    roots = ("/code", "/code/vendor", "/notes")
    assert root_of("/code/vendor/x", roots) == "/code/vendor"
    assert root_of("/code/src", roots) == "/code" and root_of("/etc", roots) is None


def test_a_path_is_resolved_from_the_current_folder_with_home_and_links(tmp_path):
    (tmp_path / "code" / "app").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "code" / "escape").symlink_to(tmp_path / "outside")
    code = str(tmp_path / "code")
    assert resolve(code, "app") == str(tmp_path / "code" / "app")
    assert resolve(code + "/app", "..") == code
    assert resolve("/anywhere", "~/x", home=code) == code + "/x"
    assert resolve("/anywhere", code + "/app/") == code + "/app"
    # a link inside a root leading out of it is where it leads: refused by the roots
    assert resolve(code, "escape") == str(tmp_path / "outside")
    assert root_of(resolve(code, "escape"), (code,)) is None


def test_the_channels_choice_comes_before_the_configured_folder():
    assert base_dir("/code", "/code/app") == "/code/app"
    assert base_dir("/code", None) == "/code" and base_dir(None, None) is None


def test_in_a_worktree_the_agent_keeps_its_place_below_the_checkout():
    assert in_worktree("/repo", "/repo", "/repo.worktrees/t-1") == "/repo.worktrees/t-1"
    assert in_worktree("/repo/src/app", "/repo", "/wt") == os.path.join("/wt", "src", "app")


def test_the_other_roots_are_the_sessions_additional_directories():
    roots = ("/code", "/notes", "/docs")
    assert additional("/code/app", roots) == ("/notes", "/docs")
    # in a worktree of /code (outside every root): /code is what the worktree stands for
    assert additional("/code.worktrees/t-1", roots, origin="/code/app") == ("/notes", "/docs")
    assert additional(None, roots) == () and additional("/code", ("/code",)) == ()


def test_a_refusal_names_the_roots_in_one_line():
    line = refusal("Alice", "/etc", ("/code", "/notes"))
    assert line == "Alice may work only in /code, /notes (agents.<name>.roots); /etc is not in them."
    assert "\n" not in refusal("Alice", "/etc", ())


def test_a_chosen_folder_is_resolved_again_and_kept_only_inside_the_roots(tmp_path):
    (tmp_path / "code" / "app").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    code, app = str(tmp_path / "code"), str(tmp_path / "code" / "app")
    assert recheck(app, (code,)) == (app, "")
    os.rename(app, str(tmp_path / "code" / "was-app"))
    assert recheck(app, (code,)) == (None, "")  # gone: as configured, nothing to say
    os.symlink(tmp_path / "outside", app)  # swapped for a link out of the roots
    assert recheck(app, (code,)) == (None, str(tmp_path / "outside"))
    os.unlink(app)
    os.symlink(tmp_path / "code" / "was-app", app)  # a link that stays inside: where it leads
    assert recheck(app, (code,)) == (str(tmp_path / "code" / "was-app"), "")
    line = moved_out("Alice", app, str(tmp_path / "outside"), code)
    assert "\n" not in line and line == (
        f"Alice: the folder chosen with !cwd, {app}, now leads to {tmp_path / 'outside'}, "
        f"outside its roots (agents.<name>.roots): this session opens in {code} instead."
    )
