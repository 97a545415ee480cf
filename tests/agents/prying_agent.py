"""A prying ACP agent for tests (docs/sandbox.md): `python tests/agents/prying_agent.py`.

A real ACP agent over stdio (acp.agent_kit: the official Python SDK imports as `acp`, the name of
this project's own package, so it cannot be installed beside it). Each prompt carries a plan
between `PRY` markers, `PRY{"read": [...], "list": [...], "write": [...], "rename": [[from, to],
...], "connect": [...], "pid": N}PRY`, and the agent tries, with nothing but its own process,
everything it names, and more:

- reads each `read` file and lists each `list` folder;
- renames each `rename` path away (and leaves it there);
- writes a file at each `write` path, making its folders first (after the renames: a folder
  renamed away is then made anew, as an attacker would, with the file in it);
- connects to each `connect` Unix socket;
- reads /proc/<pid>/environ and /proc/<pid>/cmdline of every process it can see, and of `pid`
  (the bridge's, as the test knows it);
- tells its own environment.

It writes what it reached to `pried.json` in its working directory (so the test reads it, and
sees that the agent can write there) and answers `pried: N paths reached`.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `acp`

from acp.agent_kit import AgentBase, Turn, run  # noqa: E402

PLAN = re.compile(r"PRY(\{.*?\})PRY", re.S)
SHOWN = 400  # characters of what was read kept in the report


def read(path: str) -> dict:
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
    except OSError as exc:
        return {"reached": False, "why": f"{type(exc).__name__}: {exc.strerror}"}
    if not data:
        return {"reached": False, "why": "empty"}
    return {"reached": True, "text": data[:SHOWN].decode("utf-8", "replace").replace("\x00", " ")}


def listing(path: str) -> dict:
    try:
        entries = sorted(os.listdir(path))
    except OSError as exc:
        return {"reached": False, "why": f"{type(exc).__name__}: {exc.strerror}"}
    return {"reached": bool(entries), "entries": entries}


def write(path: str) -> dict:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write("pried")
    except OSError as exc:
        return {"reached": False, "why": f"{type(exc).__name__}: {exc.strerror}"}
    return {"reached": True}


def connect(path: str) -> dict:
    """A Unix socket at `path`, connected to (the bridge's ACP socket must be out of reach)."""
    import socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as exc:
        return {"reached": False, "why": f"{type(exc).__name__}: {exc.strerror}"}
    finally:
        conn.close()
    return {"reached": True}


def rename(source: str, target: str) -> dict:
    try:
        os.rename(source, target)
    except OSError as exc:
        return {"reached": False, "why": f"{type(exc).__name__}: {exc.strerror}"}
    return {"reached": True, "to": target}


def processes(pid: int | None) -> dict:
    pids = sorted({int(p) for p in os.listdir("/proc") if p.isdigit()} | ({pid} if pid else set()))
    found = {}
    for number in pids:
        if number == os.getpid():
            continue
        found[str(number)] = {"environ": read(f"/proc/{number}/environ"), "cmdline": read(f"/proc/{number}/cmdline")}
    return found


class Prying(AgentBase):
    name = "prying"
    version = "1.0"
    load_session = False

    async def prompt(self, turn: Turn) -> str:
        found = PLAN.search(turn.text)
        plan = json.loads(found.group(1)) if found else {}
        report = {
            "read": {path: read(path) for path in plan.get("read", [])},
            "list": {path: listing(path) for path in plan.get("list", [])},
            "rename": {source: rename(source, target) for source, target in plan.get("rename", [])},
            "write": {path: write(path) for path in plan.get("write", [])},
            "connect": {path: connect(path) for path in plan.get("connect", [])},
            "proc": processes(plan.get("pid")),
            "env": dict(os.environ),
            "cwd": os.getcwd(),
        }
        parts = ("read", "list", "rename", "write", "connect")
        reached = sum(1 for part in parts for v in report[part].values() if v["reached"])
        Path("pried.json").write_text(json.dumps(report, indent=1))
        await turn.say(f"pried: {reached} paths reached")
        return "end_turn"


if __name__ == "__main__":
    run(Prying())
