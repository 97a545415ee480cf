"""Helpers shared by the acp tests (a module, since tests/acp is not a package)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from acp import AgentSpec

SCRIPTED = str(Path(__file__).resolve().parents[1] / "agents" / "scripted_agent.py")


def scripted_spec(name: str = "alice", *args: str, **kw) -> AgentSpec:
    return AgentSpec(name=name, command=[sys.executable, SCRIPTED, *args], **kw)


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
