"""Run the benchmarks and print one table: `python -m tests.bench.run [--quick] [--only NAME ...]`.

Starts its own Synapse (bridge.local.homeserver) in a temporary folder with two appservices: the
bridge and a bare aiohttp echo floor. Every figure is measured in this run, beside its baseline.
The table is printed and written to tests/bench/last-results.md. These are measurements, not
tests: the exit code is 0 whatever the goals say (unless a benchmark crashes).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aiohttp  # noqa: E402
from common import ROOT, Owner, start_homeserver  # noqa: E402

ALL = (
    "latency",
    "firsttoken",
    "store",
    "start",
    "throughput",
    "faults",
    "soak",
    "model",
    "prepare",
    "e2ee",
    "voice",
    "sandbox",
    "scale",
    "sustained",
    "attach",
)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    try:
        from importlib.metadata import version

        synapse = version("matrix-synapse")
    except Exception:
        synapse = "?"
    return (
        f"{cpu}, {os.cpu_count()} CPUs{mem}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; Synapse {synapse} (SQLite)"
    )


def table(rows: list[tuple]) -> str:
    head = ("Benchmark", "Figure", "Bridge", "Baseline", "Ratio", "Goal", "Met")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        met = {True: "yes", False: "**NO**", None: ""}[row[6]]
        lines.append("| " + " | ".join(str(c) for c in row[:6]) + f" | {met} |")
    return "\n".join(lines)


async def latency(bench, http, owner, method: str, rows: list, notes: list) -> None:
    """The latency bench: from the owner's side by `method` ("blocks", then the in-process table;
    or "restart": docs/performance.md "Latency as the owner sees it")."""
    import bench_latency

    if method == "restart":
        print("• declaring floor vs bridge restarted per block, owner's side …", flush=True)
        result = await bench_latency.run_restart(bench, owner)
        rows += bench_latency.restart_rows(result)
        notes += bench_latency.restart_notes(result)
        bench_latency.dump(result)
        return
    print("• echo floor vs bridge, from the owner's side …", flush=True)
    result = await bench_latency.run_owner_side(bench, owner)
    rows += bench_latency.owner_rows(result)
    notes += bench_latency.owner_notes(result)
    print("• echo floor in process, in-bridge latency, streaming …", flush=True)
    result = await bench_latency.run(bench, http, owner)
    rows += bench_latency.rows(result)
    notes += bench_latency.notes(result)


async def main(args) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("bridge").setLevel(logging.ERROR)
    started = time.monotonic()
    rows: list[tuple] = []
    notes: list[str] = []
    only = args.only or ALL

    async def measure(name: str, what: str, run) -> None:
        """If `name` is to run: bench_<name>, `what` said, run (`run(module)` gives the awaitable of
        its result), its rows and notes kept."""
        if name not in only:
            return
        module = importlib.import_module(f"bench_{name}")
        print(f"• {what} …", flush=True)
        result = await run(module)
        rows.extend(module.rows(result))
        notes.extend(module.notes(result))

    with tempfile.TemporaryDirectory(prefix="sidekicks-bench-") as tmp:
        folder = Path(tmp)
        await measure("store", "store", lambda m: asyncio.to_thread(m.run, folder / "store", args.quick))
        await measure(
            "model",
            "local model: sessions, switches, restart, replay, RSS",
            lambda m: asyncio.to_thread(m.run, folder / "model", args.quick),
        )
        await measure(
            "sandbox", "an agent's start in its sandbox vs without", lambda m: m.run(folder / "sandbox", args.quick)
        )
        await measure(
            "prepare",
            "local model: first token with and without prepare",
            lambda m: asyncio.to_thread(m.run, folder / "prepare", args.quick),
        )

        async def soak(m):
            async with aiohttp.ClientSession() as http:  # no Synapse: see bench_soak's docstring
                return await m.run(folder / "soak", args.quick, http)

        await measure("soak", "soak: 100k messages (10k with --quick) over 1,000 channels", soak)
        await measure("voice", "voice notes: word error rate, transcription time", lambda m: m.run(args.quick))
        needs_hs = [name for name in only if name not in ("store", "soak", "model", "voice", "sandbox", "prepare")]
        if needs_hs:
            bench = await start_homeserver(folder / "hs", args.quick)
            try:
                async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as http:
                    owner = Owner(bench.url, http)
                    await owner.login(bench.owner_id, bench.owner_password)
                    owner.start_sync()
                    try:
                        if "latency" in only:
                            await latency(bench, http, owner, args.method, rows, notes)
                        if "firsttoken" in only:
                            import bench_first_token

                            print("• the local agent's first token, step by step …", flush=True)
                            result = await bench_first_token.run(bench, owner)
                            rows += bench_first_token.rows(result)
                            notes += bench_first_token.notes(result)
                            notes.append("first token, p50 per step (ms):\n\n" + bench_first_token.table(result))
                            notes.append("first token, the cold starts:\n\n" + bench_first_token.cold_table(result))
                        await measure("start", "bridge start and RSS", lambda m: m.run(bench, http, folder / "start"))
                        await measure(
                            "scale",
                            "scale: start, RSS, idle CPU, TCP with N channels × 5 agents",
                            lambda m: m.run(bench, folder / "scale"),
                        )
                        await measure(
                            "faults",
                            "faults: crash notice, 🛑, framing, local model",
                            lambda m: m.run(bench, http, owner),
                        )
                        await measure("e2ee", "encrypted vs plain DM", lambda m: m.run(bench, folder / "e2ee"))
                        await measure(
                            "sustained",
                            "sustained: 100 messages/s over 50 rooms (ramp first)",
                            lambda m: m.run(bench, owner, folder / "sustained"),
                        )
                        await measure("throughput", "throughput", lambda m: m.run(bench, http, owner))
                        await measure(
                            "attach",
                            "an ACP client attached vs driving the agent directly",
                            lambda m: m.run(bench, owner, folder / "attach"),
                        )
                    finally:
                        await owner.stop_sync()
            finally:
                await bench.server.stop()
    elapsed = time.monotonic() - started
    mode = "quick" if args.quick else "full"
    command = "python -m tests.bench.run" + (" --quick" if args.quick else "")
    text = (
        f"# Benchmark results ({mode} run)\n\n"
        f"Machine: {machine()}\n\nCommand: `{command}` (from the repository root, venv active); "
        f"took {elapsed:.0f} s on {time.strftime('%Y-%m-%d %H:%M')}.\n\n"
        "Latencies are p50/p99 over the run; Baseline is the figure measured beside it in the "
        "same run (echo floor, smallest store, empty store…).\n\n"
        + table(rows)
        + "\n"
        + ("\n" + "\n".join(f"- {n}" for n in notes) + "\n" if notes else "")
    )
    print()
    print(text)
    if not args.only:
        (HERE / "last-results.md").write_text(text, encoding="utf-8")
    return 0


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs (< 3 min)")
    parser.add_argument("--only", nargs="*", choices=ALL, help="run only these benchmarks")
    parser.add_argument(
        "--method",
        choices=("blocks", "restart"),
        default="blocks",
        help="latency from the owner's side: one bridge, three sides in blocks (with the in-process "
        "table after it); or restart: a fresh bridge per block, declaring floor and bridge alternating",
    )
    os.chdir(ROOT)
    return asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(cli())
