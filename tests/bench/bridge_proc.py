"""A bridge in a process of its own, for start time and RSS: `python bridge_proc.py CONFIG DATA_DIR`.

Prints one JSON line once ready ({"start_s": open_store + Bridge() + start(), "import_s": …,
"cpu_s": the process's CPU time so far, imports included: what the machine's load does not move}),
then answers each "rss" line on stdin with {"rss_kb": VmRSS of this process only (agents, its
children, are not counted)}; stdin closing stops the bridge. With SIDEKICKS_BENCH_PROBES=1 in its
environment, probes.py's stamps are installed, a "probes" line is answered with them and a
"reset" line clears them. SIDEKICKS_BENCH_LOG=WARNING (or INFO) shows the bridge's log on stderr
(ERROR only without it).
"""

from __future__ import annotations

import time

T_PROCESS = time.perf_counter()

import asyncio  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import config as configuration  # noqa: E402
from bridge.bridge import Bridge  # noqa: E402
from bridge.cli import open_store  # noqa: E402
from config import registration as registrations  # noqa: E402


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def load(config_path: str, data_dir: str) -> tuple[configuration.Config, registrations.Registration | None]:
    """The bench's config (its data folder `data_dir`) and its appservice registration."""
    cfg = dataclasses.replace(configuration.load(Path(config_path)), data_dir=Path(data_dir))
    return cfg, registrations.read(cfg.registration_path)


async def stdin_lines() -> AsyncIterator[str]:
    """Each line on stdin, stripped, until it closes (read on a thread: the loop goes on)."""
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        yield line.strip()


async def main(config_path: str, data_dir: str) -> None:
    logging.basicConfig(level=os.environ.get("SIDEKICKS_BENCH_LOG", "ERROR"))
    probes = None
    if os.environ.get("SIDEKICKS_BENCH_PROBES") == "1":
        import probes

        probes.install()
    import_s = time.perf_counter() - T_PROCESS
    cfg, registration = load(config_path, data_dir)
    t0 = time.perf_counter()
    store, unavailable = open_store(cfg)
    bridge = Bridge(cfg, registration, store, history_unavailable=unavailable)
    await bridge.start()
    start_s = time.perf_counter() - t0
    ready = {"start_s": start_s, "import_s": import_s, "rss_kb": rss_kb(), "cpu_s": time.process_time()}
    print(json.dumps(ready), flush=True)
    try:
        async for line in stdin_lines():
            if line == "rss":
                print(json.dumps({"rss_kb": rss_kb(), "portals": len(bridge.portals)}), flush=True)
            elif line.strip() == "probes" and probes is not None:
                stamps = {"txn_entry": probes.txn_entry, "prompt_written": probes.prompt_written}
                print(json.dumps({**stamps, "answers": probes.answers}), flush=True)
            elif line.strip() == "reset" and probes is not None:
                probes.reset()
    finally:
        await bridge.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
