"""The benchmarks' helper processes, seen from the bench: bridge_proc.py and owner_proc.py.

Each prints one JSON line once ready, then answers one JSON line per line it is given on stdin,
and ends when its stdin closes. Used by bench_latency.py and bench_first_token.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BRIDGE, OWNER = HERE / "bridge_proc.py", HERE / "owner_proc.py"


async def start(
    script: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> tuple[asyncio.subprocess.Process, dict]:
    """Run `script` with this Python; (the process, its ready line). RuntimeError if it ends or
    says an error before it is ready."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        raise RuntimeError(f"{script.name} ended before it was ready")
    answer = json.loads(line)
    if "error" in answer:
        raise RuntimeError(f"{script.name}: {answer['error']}")
    return proc, answer


async def start_bridge(
    config: Path, data: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> tuple[asyncio.subprocess.Process, dict]:
    """A bridge of its own (bridge_proc.py) on `config`, its data in `data`."""
    return await start(BRIDGE, str(config), str(data), env=env, timeout=timeout)


async def start_owner(bench, timeout: float = 180) -> tuple[asyncio.subprocess.Process, dict]:
    """The owner's matrix-nio client (owner_proc.py), logged in and synced."""
    return await start(OWNER, bench.url, bench.owner_id, bench.owner_password, timeout=timeout)


async def ask(proc: asyncio.subprocess.Process, line: str, timeout: float = 120) -> dict:
    """Write one line, read the answer's."""
    proc.stdin.write((line + "\n").encode())
    await proc.stdin.drain()
    out = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not out:
        raise RuntimeError("the process ended")
    return json.loads(out)


async def end(proc: asyncio.subprocess.Process | None) -> None:
    """Close its stdin and wait for it (killed after 30 s)."""
    if proc is not None and proc.returncode is None:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
