"""What the config unit tests share: a config of one agent written and its problems read, and the
command line refusing a config (exit 2, one line a problem)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import config

BASE = {"owner": "@me:localhost", "homeserver": {"url": "http://127.0.0.1:8008"}}


def write_agent(tmp_path: Path, agent: dict, name: str = "alice") -> str:
    """A config whose one agent, `name`, is `agent` (with `command: [x]`); its path."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**BASE, "agents": {name: {"command": ["x"], **agent}}}))
    return str(path)


def agent_problems(tmp_path: Path, agent: dict) -> list[str]:
    """What config.load says of such a config, each line without the file's name."""
    path = write_agent(tmp_path, agent)
    with pytest.raises(config.ConfigError) as caught:
        config.load(path)
    return [line[len(path) + 2 :] for line in caught.value.problems]


def refused(command: str, path: str | Path) -> list[str]:
    """`python -m bridge COMMAND -c PATH` exits 2: the lines it wrote to stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "bridge", command, "-c", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result
    return result.stderr.strip().splitlines()
