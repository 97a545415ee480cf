"""The bridge in a process of its own for the soak: `python soak_proc.py CONFIG DATA_DIR KEEP_MS EVERY_MS`.

Like bridge_proc.py, with the store's transaction-key horizon shortened to KEEP_MS (pruned at
most every EVERY_MS), so that a run of minutes reaches it. Prints one JSON line once ready, then
answers each "stats" line on stdin with {"rss_kb", "prompts", "answers", "portals", "pruned"};
stdin closing stops the bridge.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bridge_proc import load, rss_kb, stdin_lines  # noqa: E402

from bridge.bridge import Bridge  # noqa: E402
from bridge.cli import open_store  # noqa: E402
from store.turns import NOT_BEGUN  # noqa: E402


async def main(config_path: str, data_dir: str, keep_ms: int, every_ms: int) -> None:
    logging.basicConfig(level=logging.ERROR)
    cfg, registration = load(config_path, data_dir)
    store, unavailable = open_store(cfg)
    assert not unavailable
    store.txn_keep_ms, store.txn_prune_every_ms = keep_ms, every_ms
    pruned = [0]
    txns = store.parts.txns
    prune = txns.prune_before

    def counting_prune(now):  # how many keys the bridge's own mark_txn pruned, for the notes
        gone = prune(now)
        pruned[0] += max(gone, 0)
        return gone

    txns.prune_before = counting_prune
    bridge = Bridge(cfg, registration, store, history_unavailable=False)
    await bridge.start()
    print(json.dumps({"ready": True, "rss_kb": rss_kb()}), flush=True)
    try:
        async for line in stdin_lines():
            if line == "stats":
                turns = store.turns.unfinished()
                print(
                    json.dumps(
                        {
                            "rss_kb": rss_kb(),
                            "prompts": sum(t.state in NOT_BEGUN for t in turns),
                            "answers": sum(t.state not in NOT_BEGUN for t in turns),
                            "portals": len(bridge.portals),
                            "pruned": pruned[0],
                        }
                    ),
                    flush=True,
                )
    finally:
        await bridge.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
