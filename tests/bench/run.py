"""Run the benchmarks and print one table: `python -m tests.bench.run [--quick] [--only NAME ...]`.

Starts its own Synapse (bridge.local.homeserver) in a temporary folder with two appservices: the
bridge and a bare aiohttp echo floor. Every figure is measured in this run, beside its baseline.
The table is printed and written to tests/bench/last-results.md. These are measurements, not
tests: the exit code is 0 whatever the goals say (unless a benchmark crashes).
"""

from __future__ import annotations

import argparse
import asyncio
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


async def main(args) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("bridge").setLevel(logging.ERROR)
    started = time.monotonic()
    rows: list[tuple] = []
    notes: list[str] = []
    only = args.only or ALL
    with tempfile.TemporaryDirectory(prefix="sidekicks-bench-") as tmp:
        folder = Path(tmp)
        if "store" in only:
            import bench_store

            print("• store …", flush=True)
            result = await asyncio.to_thread(bench_store.run, folder / "store", args.quick)
            rows += bench_store.rows(result)
            notes += bench_store.notes(result)
        if "model" in only:
            import bench_model

            print("• local model: sessions, switches, restart, replay, RSS …", flush=True)
            result = await asyncio.to_thread(bench_model.run, folder / "model", args.quick)
            rows += bench_model.rows(result)
            notes += bench_model.notes(result)
        if "sandbox" in only:
            import bench_sandbox

            print("• an agent's start in its sandbox vs without …", flush=True)
            result = await bench_sandbox.run(folder / "sandbox", args.quick)
            rows += bench_sandbox.rows(result)
            notes += bench_sandbox.notes(result)
        if "prepare" in only:
            import bench_prepare

            print("• local model: first token with and without prepare …", flush=True)
            result = await asyncio.to_thread(bench_prepare.run, folder / "prepare", args.quick)
            rows += bench_prepare.rows(result)
            notes += bench_prepare.notes(result)
        if "soak" in only:
            import bench_soak

            print("• soak: 100k messages (10k with --quick) over 1,000 channels …", flush=True)
            async with aiohttp.ClientSession() as http:  # no Synapse: see bench_soak's docstring
                result = await bench_soak.run(folder / "soak", args.quick, http)
            rows += bench_soak.rows(result)
            notes += bench_soak.notes(result)
        if "voice" in only:
            import bench_voice

            print("• voice notes: word error rate, transcription time …", flush=True)
            result = await bench_voice.run(args.quick)
            rows += bench_voice.rows(result)
            notes += bench_voice.notes(result)
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
                            import bench_latency

                            print("• echo floor vs bridge, from the owner's side …", flush=True)
                            result = await bench_latency.run_owner_side(bench, owner)
                            rows += bench_latency.owner_rows(result)
                            notes += bench_latency.owner_notes(result)
                            print("• echo floor in process, in-bridge latency, streaming …", flush=True)
                            result = await bench_latency.run(bench, http, owner)
                            rows += bench_latency.rows(result)
                            notes += bench_latency.notes(result)
                        if "firsttoken" in only:
                            import bench_first_token

                            print("• the local agent's first token, step by step …", flush=True)
                            result = await bench_first_token.run(bench, owner)
                            rows += bench_first_token.rows(result)
                            notes += bench_first_token.notes(result)
                            notes.append("first token, p50 per step (ms):\n\n" + bench_first_token.table(result))
                        if "start" in only:
                            import bench_start

                            print("• bridge start and RSS …", flush=True)
                            result = await bench_start.run(bench, http, folder / "start")
                            rows += bench_start.rows(result)
                            notes += bench_start.notes(result)
                        if "faults" in only:
                            import bench_faults

                            print("• faults: crash notice, 🛑, framing, local model …", flush=True)
                            result = await bench_faults.run(bench, http, owner)
                            rows += bench_faults.rows(result)
                            notes += bench_faults.notes(result)
                        if "e2ee" in only:
                            import bench_e2ee

                            print("• encrypted vs plain DM …", flush=True)
                            result = await bench_e2ee.run(bench, folder / "e2ee")
                            rows += bench_e2ee.rows(result)
                            notes += bench_e2ee.notes(result)
                        if "throughput" in only:
                            import bench_throughput

                            print("• throughput …", flush=True)
                            result = await bench_throughput.run(bench, http, owner)
                            rows += bench_throughput.rows(result)
                            notes += bench_throughput.notes(result)
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
    os.chdir(ROOT)
    return asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(cli())
