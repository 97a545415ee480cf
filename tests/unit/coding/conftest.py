"""Shared fixtures of the coding-agent surface's unit tests."""

import subprocess

import pytest


@pytest.fixture
def repo(tmp_path):
    """A git checkout with one commit (README) and a src/ folder: the agent's configured cwd."""
    top = tmp_path / "app"
    (top / "src").mkdir(parents=True)

    def run(*args):
        return subprocess.run(["git", "-C", str(top), *args], check=True, capture_output=True)

    run("init", "-q")
    (top / "README").write_text("hello\n")
    run("add", "README")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return top
