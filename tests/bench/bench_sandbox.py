"""An agent's start in its sandbox (docs/sandbox.md) vs without: spawn → `initialize` answered.

The scripted test agent, started by acp.start_agent as the bridge starts it: in the bubblewrap
sandbox the bridge gives it (its working directory writable; a config folder, a data folder and a
registration hidden; other users' homes and /run hidden; below the supervisor that ends it with
the bridge), once with `network: off` (a network namespace with only its loopback) and once with
`network: on` (slirp4netns started against that namespace before the agent runs), and as a plain
child process — the three sides taking turns, so all see the same machine load. The first start
of each side is left out (the probes, cold caches). Goal: ≤ 50 ms more with the sandbox, with
and without its network, as the difference of the medians; the median of the rounds' own
differences (each sandboxed start against the plain start of the same round, seconds apart) is
given beside it: on a loaded machine it moves less with the load between rounds. Then the
sandbox's own start alone: spawn → `date` running in it (the time it prints), the three sides
taking turns the same way. The load
(/proc/loadavg) before and after is noted: an agent's start is mostly Python's own, which
stretches with the load, and so does the noise.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from common import median, p99

from acp import AgentSpec, start_agent
from acp.process import AgentProcess
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


async def _bare(spec: AgentSpec) -> float:
    """The sandbox's own start: spawn → `date` running in it (it prints the time it started,
    the same clock as the bridge's), no Python start to hide it."""
    began = time.time()
    process = AgentProcess(spec.name, ["date", "+%s.%N"], spec.cwd, sandbox=spec.sandbox)
    await process.start()
    started = float(await process.stdout.readline())
    await process.stop()
    return started - began


async def _turns(measure, specs: dict[str, AgentSpec], rounds: int) -> dict[str, list[float]]:
    """`rounds` measures of each side, the sides taking turns (each first, second and last in
    turn), after one warm-up start of each, not counted."""
    times: dict[str, list[float]] = {side: [] for side in specs}
    for side in specs:
        await measure(specs[side])
    sides = list(specs)
    for i in range(rounds):
        for side in sides[i % 3 :] + sides[: i % 3]:
            times[side].append(await measure(specs[side]))
    return times


async def run(folder: Path, quick: bool = False, rounds: int | None = None) -> dict:
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
    rounds = rounds or (8 if quick else 40)
    load_before = os.getloadavg()
    times = await _turns(_start, specs, rounds)
    bare = await _turns(_bare, specs, 2 * rounds)
    return {"rounds": rounds, "times": times, "bare": bare, "load": (load_before, os.getloadavg())}


def paired_ms(r: dict, side: str) -> float:
    """The median of the rounds' own differences, `side` against plain, in ms."""
    return statistics.median(b - p for b, p in zip(r["times"][side], r["times"]["plain"], strict=True)) * 1e3


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
                f"agent start: the sandbox's cost ({what}, p50 difference; median of the rounds' own)",
                f"{more_ms:+.0f} ms; {paired_ms(r, side):+.0f} ms",
                "",
                "",
                f"≤ {GOAL_MS:g} ms",
                more_ms <= GOAL_MS,
            ),
        ]
    bare = {side: median(found) * 1e3 for side, found in r["bare"].items()}
    found.append(
        (
            "Sandbox",
            f"the sandbox's own start, spawn → `date` running in it, p50 ({2 * r['rounds']} each, in turns): "
            "network off / on vs plain",
            f"{bare['sandbox']:.0f} / {bare['network']:.0f} ms",
            f"{bare['plain']:.0f} ms",
            f"+{bare['sandbox'] - bare['plain']:.0f} / +{bare['network'] - bare['plain']:.0f} ms",
            f"≤ {GOAL_MS:g} ms more",
            max(bare["sandbox"], bare["network"]) - bare["plain"] <= GOAL_MS,
        )
    )
    return found


def notes(r: dict) -> list[str]:
    before, after = (" ".join(f"{x:.1f}" for x in load) for load in r["load"])
    return [
        "sandbox: bubblewrap (bwrap) with the bridge's mounts, below its supervisor (/bin/sh), with "
        "network off and on (slirp4netns); the plain side is the same agent as a child process; "
        f"all via acp.start_agent, the scripted Python agent; load {before} before, {after} after"
    ]


if __name__ == "__main__":  # python tests/bench/bench_sandbox.py [--quick] [--rounds N]
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="sidekicks-bench-sandbox-") as tmp:
        count = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else None
        result = asyncio.run(run(Path(tmp), "--quick" in sys.argv, count))
    for row in rows(result):
        print(" | ".join(str(c) for c in row))
    print(*notes(result), sep="\n")
