"""An agent's start in its sandbox (docs/sandbox.md) vs without: spawn → `initialize` answered.

The scripted test agent, started by acp.start_agent as the bridge starts it: in the bubblewrap
sandbox the bridge gives it (its working directory writable; a config folder, a data folder and a
registration hidden; other users' homes and /run hidden; below the supervisor that ends it with
the bridge), once with `network: off` (a network namespace with only its loopback) and once with
`network: on` (slirp4netns started against that namespace before the agent runs), and as a plain
child process — the three sides taking turns, so all see the same machine load. The first start
of each side is left out (the probes, cold caches). Goal: ≤ 50 ms more with the sandbox, with
and without its network.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
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
    command = [sys.executable, str(SCRIPTED)]
    specs = {
        "sandbox": AgentSpec(name="boxed", command=command, cwd=str(work), sandbox=replace(box, network=False)),
        "network": AgentSpec(name="networked", command=command, cwd=str(work), sandbox=box),
        "plain": AgentSpec(name="plain", command=command, cwd=str(work)),
    }
    rounds = 8 if quick else 30
    times: dict[str, list[float]] = {side: [] for side in specs}
    for side in specs:  # warm-up, not counted
        await _start(specs[side])
    sides = list(specs)
    for i in range(rounds):
        for side in sides[i % 3 :] + sides[: i % 3]:  # each side first, second and last in turn
            times[side].append(await _start(specs[side]))
    return {"rounds": rounds, "times": times}


def rows(r: dict) -> list[tuple]:
    plain = median(r["times"]["plain"])
    found = []
    for side, what in (("sandbox", "network: off"), ("network", "network: on, slirp4netns")):
        boxed = median(r["times"][side])
        more_ms = (boxed - plain) * 1e3
        found += [
            (
                "Sandbox",
                f"agent start ({what}), spawn → initialize answered, p50 / p99 ({r['rounds']} each, in turns)",
                f"{boxed * 1e3:.0f} / {p99(r['times'][side]) * 1e3:.0f} ms",
                f"{plain * 1e3:.0f} / {p99(r['times']['plain']) * 1e3:.0f} ms",
                f"{boxed / plain:.2f}×",
                f"≤ {GOAL_MS:g} ms more",
                more_ms <= GOAL_MS,
            ),
            (
                "Sandbox",
                f"agent start: the sandbox's cost ({what}, p50 difference)",
                f"{more_ms:+.0f} ms",
                "",
                "",
                f"≤ {GOAL_MS:g} ms",
                more_ms <= GOAL_MS,
            ),
        ]
    return found


def notes(r: dict) -> list[str]:
    return [
        "sandbox: bubblewrap (bwrap) with the bridge's mounts, below its supervisor (/bin/sh), with "
        "network off and on (slirp4netns); the plain side is the same agent as a child process; "
        "all via acp.start_agent, the scripted Python agent"
    ]


if __name__ == "__main__":  # python tests/bench/bench_sandbox.py [--quick]
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="sidekicks-bench-sandbox-") as tmp:
        result = asyncio.run(run(Path(tmp), "--quick" in sys.argv))
    for row in rows(result):
        print(" | ".join(str(c) for c in row))
