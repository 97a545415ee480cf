"""Soak of exactly once across restarts: the scenario of tests/integration/test_restarts.py
(SIGTERM and kill -9 at random moments, also during start-up; messages while down and while
starting; a plain DM and an encrypted channel; agents with and without loadSession sharing one
slot) with many more stops: `python -m tests.bench.bench_restarts [STOPS] [SEED]` (default 500).
Prints the figures (and keeps them in tests/bench/last-restarts.json); exit code 1 if any
invariant broke.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "integration")]

from test_restarts import run_scenario  # noqa: E402


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    stops = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with tempfile.TemporaryDirectory(prefix="sidekicks-restarts-") as tmp:
        figures = asyncio.run(run_scenario(Path(tmp), stops, seed))
    problems = figures.pop("problems")
    print(json.dumps(figures, indent=1))
    for line in problems:
        print("PROBLEM:", line)
    (HERE / "last-restarts.json").write_text(
        json.dumps({**figures, "seed": seed, "problems": problems}, indent=1) + "\n"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
