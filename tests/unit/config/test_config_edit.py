"""The config file edited by `agents add | remove` (docs/configuration.md "Agents from the
registry"): comments, order and quoting kept; the new entry as the loader reads it."""

from __future__ import annotations

import os

import pytest

import config
from config import config_edit

CONFIG = """\
# my sidekicks
owner: "@me:localhost"   # me
homeserver:
  url: http://127.0.0.1:8008
agents:
  # the small one
  local:
    command: [python, -m, acp.agents.local_model]
    title: 'Local'
limits:
  agents_in_memory: 2   # two at a time
"""


@pytest.fixture
def path(tmp_path):
    file = tmp_path / "config.yaml"
    file.write_text(CONFIG)
    os.chmod(file, 0o640)
    return file


def test_an_added_agent_comes_last_in_agents_and_the_rest_is_untouched(path):
    settings = {
        "title": "Claude Code",
        "command": ["npx", "-y", "@zed-industries/claude-code-acp@0.16.0"],
        "cwd": "~",
        "sandbox": {"write": ["~/.claude", "~/.claude.json"]},
    }
    config_edit.add_agent(path, "claude", settings)
    text = path.read_text()
    assert text.startswith(CONFIG.split("limits:")[0]), text  # comments, quotes, order
    assert text.endswith("limits:\n  agents_in_memory: 2   # two at a time\n"), text
    assert "    command: [npx, -y, '@zed-industries/claude-code-acp@0.16.0']\n" in text
    assert "    cwd: '~'\n" in text  # `~` alone would be null
    loaded = config.load(path)
    assert list(loaded.agents) == ["local", "claude"]
    claude = loaded.agents["claude"]
    assert claude.cwd == os.path.realpath(os.path.expanduser("~"))
    assert claude.sandbox.write == (os.path.expanduser("~/.claude"), os.path.expanduser("~/.claude.json"))
    assert os.stat(path).st_mode & 0o777 == 0o640


def test_removing_an_agent_keeps_the_others_and_the_comments(path):
    config_edit.add_agent(path, "tiny", {"title": "Tiny", "command": ["tiny"]})
    config_edit.remove_agent(path, "tiny")
    assert path.read_text() == CONFIG


def test_a_name_taken_or_unknown_is_refused_in_one_line(path):
    with pytest.raises(config.ConfigError, match="'local' is already configured"):
        config_edit.add_agent(path, "local", {"command": ["x"]})
    with pytest.raises(config.ConfigError, match=r"no agent named 'bob' \(configured: local\)"):
        config_edit.remove_agent(path, "bob")
    assert path.read_text() == CONFIG


def test_an_entry_the_loader_refuses_is_not_written(path):
    with pytest.raises(config.ConfigError, match="not changed: .*folder does not exist"):
        config_edit.add_agent(path, "far", {"command": ["x"], "cwd": "/no/such/folder"})
    assert path.read_text() == CONFIG


def test_a_config_without_agents_gets_the_section(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text('owner: "@me:localhost"\nhomeserver: {url: "http://127.0.0.1:1"}\n')
    config_edit.add_agent(path, "tiny", {"command": ["tiny"]})
    assert list(config.load(path).agents) == ["tiny"]
