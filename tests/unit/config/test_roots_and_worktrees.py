"""Where an agent works, as configured: `roots:` (the folders `!cwd` may choose from) and
`worktrees: on | off` (a git worktree per thread). Every problem one line; exit 2."""

from __future__ import annotations

import subprocess

import pytest
from config_files import agent_problems, refused, write_agent

import config


def test_roots_default_to_the_cwd_and_worktrees_to_off(tmp_path):
    (tmp_path / "code").mkdir()
    alice = config.load(write_agent(tmp_path, {"cwd": "code"})).agents["alice"]
    assert alice.roots == (str(tmp_path / "code"),) and alice.worktrees is False
    nowhere = config.load(write_agent(tmp_path, {})).agents["alice"]
    assert nowhere.roots == () and nowhere.cwd is None


def test_roots_are_folders_relative_to_the_config_file_links_resolved(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for folder in ("code", "notes", "home/docs"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "notes")
    alice = config.load(write_agent(tmp_path, {"cwd": "code", "roots": ["code", "link", "~/docs", "code"]})).agents[
        "alice"
    ]
    assert alice.roots == (str(tmp_path / "code"), str(tmp_path / "notes"), str(tmp_path / "home" / "docs"))
    one = config.load(write_agent(tmp_path, {"roots": "notes"})).agents["alice"]
    assert one.roots == (str(tmp_path / "notes"),)


@pytest.mark.parametrize(
    "agent,expected",
    [
        ({"roots": ["/does/not/exist"]}, "agents.alice.roots: folder does not exist: /does/not/exist"),
        ({"roots": []}, "agents.alice.roots: must be a list of folders, like [~/code, ~/notes]"),
        ({"roots": [3]}, "agents.alice.roots: must be a list of folders, like [~/code, ~/notes]"),
        ({"worktrees": "maybe"}, "agents.alice.worktrees: must be on or off, got 'maybe'"),
        (
            {"worktrees": True},
            "agents.alice.worktrees: on needs a cwd: the git checkout whose worktrees the threads get",
        ),
        ({"worktree": True}, "agents.alice.worktree: unknown key — did you mean worktrees?"),
        ({"root": ["."]}, "agents.alice.root: unknown key — did you mean roots?"),
    ],
)
def test_a_bad_roots_or_worktrees_value_is_one_line(tmp_path, agent, expected):
    assert agent_problems(tmp_path, agent) == [expected]


def test_worktrees_on_needs_a_cwd_in_a_git_checkout(tmp_path):
    (tmp_path / "plain").mkdir()
    assert agent_problems(tmp_path, {"cwd": "plain", "worktrees": "on"}) == [
        f"agents.alice.worktrees: on needs a cwd inside a git checkout; {tmp_path / 'plain'} is not in one"
    ]
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    alice = config.load(write_agent(tmp_path, {"cwd": "repo/src", "worktrees": True})).agents["alice"]
    assert alice.worktrees is True and alice.cwd == str(repo / "src")
    assert config.loader.git_checkout(str(repo / "src")) == str(repo)


def test_a_bad_root_exits_2_from_the_command_line_in_one_line(tmp_path):
    path = write_agent(tmp_path, {"roots": ["missing"], "worktrees": "sometimes"})
    assert refused("check", path) == [
        f"{path}: agents.alice.roots: folder does not exist: {tmp_path / 'missing'}",
        f"{path}: agents.alice.worktrees: must be on or off, got 'sometimes'",
    ]
