"""An agent's start in its sandbox (docs/sandbox.md) vs without: spawn → `initialize` answered.

The scripted test agent, started by acp.start_agent as the bridge starts it: once in the bubblewrap
sandbox the bridge gives it (its working directory writable; a config folder, a data folder and a
registration hidden; other users' homes hidden), once as a plain child process — the two sides
taking turns, so both see the same machine load. The first start of each side is left out (the
bwrap probe, cold caches). Goal: ≤ 50 ms more with the sandbox.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from common import median, p99

from acp import AgentSpec, start_agent
from acp.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = ROOT / "tests" / "agents" / "scripted_agent.py"
GOAL_MS = 50.0


async def _start(spec: AgentSpec) -> float:
    began = time.perf_counter()
    agent = await start_agent(spec)
    took = time.perf_counter() - began
    await agent.stop()
    return took


async def run(folder: Path, quick: bool = False) -> dict:
    work, config, data = folder / "work", folder / "config", folder / "data"
    for path in (work, config, data):
        path.mkdir(parents=True, exist_ok=True)
    (config / "registration.yaml").write_text("as_token: x\n")
    box = Sandbox(write=(str(work),), hide=(str(config), str(data), str(config / "registration.yaml")))
    specs = {
        "sandbox": AgentSpec(name="boxed", command=[sys.executable, str(SCRIPTED)], cwd=str(work), sandbox=box),
        "plain": AgentSpec(name="plain", command=[sys.executable, str(SCRIPTED)], cwd=str(work)),
    }
    rounds = 8 if quick else 30
    times: dict[str, list[float]] = {"sandbox": [], "plain": []}
    for side in specs:  # warm-up, not counted
        await _start(specs[side])
    for i in range(rounds):
        order = ("sandbox", "plain") if i % 2 == 0 else ("plain", "sandbox")
        for side in order:
            times[side].append(await _start(specs[side]))
    return {"rounds": rounds, "times": times}


def rows(r: dict) -> list[tuple]:
    boxed, plain = median(r["times"]["sandbox"]), median(r["times"]["plain"])
    more_ms = (boxed - plain) * 1e3
    return [
        (
            "Sandbox",
            f"agent start, spawn → initialize answered, p50 / p99 ({r['rounds']} each, alternating)",
            f"{boxed * 1e3:.0f} / {p99(r['times']['sandbox']) * 1e3:.0f} ms",
            f"{plain * 1e3:.0f} / {p99(r['times']['plain']) * 1e3:.0f} ms",
            f"{boxed / plain:.2f}×",
            f"≤ {GOAL_MS:g} ms more",
            more_ms <= GOAL_MS,
        ),
        (
            "Sandbox",
            "agent start: the sandbox's cost (p50 difference)",
            f"{more_ms:+.0f} ms",
            "",
            "",
            f"≤ {GOAL_MS:g} ms",
            more_ms <= GOAL_MS,
        ),
    ]


def notes(r: dict) -> list[str]:
    return [
        "sandbox: bubblewrap (bwrap) with the bridge's mounts; the plain side is the same agent "
        "as a child process; both via acp.start_agent, the scripted Python agent"
    ]


if __name__ == "__main__":  # python tests/bench/bench_sandbox.py [--quick]
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="sidekicks-bench-sandbox-") as tmp:
        result = asyncio.run(run(Path(tmp), "--quick" in sys.argv))
    for row in rows(result):
        print(" | ".join(str(c) for c in row))
