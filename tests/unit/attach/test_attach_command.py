"""`sidekicks acp` (docs/commands.md "The command line") with no bridge to reach: one line on
stderr, nothing on stdout (the ACP stream), and an exit code; an unknown `--agent`: exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def acp(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "owner": "@me:localhost",
                "homeserver": {"url": "http://127.0.0.1:1", "domain": "localhost"},
                "agents": {"alice": {"command": ["true"]}},
            }
        )
    )
    return subprocess.run(
        [sys.executable, "-m", "bridge", "acp", "-c", str(path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")},
        input="",
    )


def test_with_no_bridge_running_it_says_so_in_one_line(tmp_path):
    done = acp(tmp_path, "--agent", "alice")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("sidekicks acp: the bridge is not reachable at ")
    assert done.stderr.rstrip().endswith("is it running?") and done.stderr.count("\n") == 1


def test_an_unknown_agent_is_refused(tmp_path):
    done = acp(tmp_path, "--agent", "zed")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "sidekicks acp: no agent called zed (agents: alice)\n"
