"""Soak of exactly once across kill -9: the scene of tests/integration/test_kill9.py (the owner
writing in a DM, the bridge killed with SIGKILL at random moments, also while the owner writes
and while it is down) with many more kills: `python -m tests.bench.bench_kills [KILLS]
[--batch N] [--seed S]` (default 1,000 in batches of 50, seeds from 20261203; ~3 s a kill on
an idle 2-core machine, ~35 s at load 10). The suite runs the same test with 30 kills.

Each batch is the test once, with a seed of its own (a fresh homeserver and bridge): its figures
(lost, answered twice, out of order, interrupted before it began, …) are added to the totals,
which are printed after each batch with the load, so a soak stopped early still says what it
saw. Stops at the first batch whose invariants broke (its pytest output shown, its folders kept
under the temporary folder's `sidekicks-kills/seed-N`); exit code 1 then.
Figures: docs/reliability.md "Restarts".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_SEED = 20261202
KEPT = Path(tempfile.gettempdir()) / "sidekicks-kills"  # each batch's pytest folders
SHOWN = ("kills", "messages", "lost", "answered twice", "out of order", "interrupted before it began")


def batch(kills: int, seed: int) -> tuple[int, dict, str]:
    """The test once with `kills` kills: (pytest's exit code, its figures, its output)."""
    with tempfile.TemporaryDirectory() as folder:
        figures_file = Path(folder) / "figures.json"
        env = {
            **os.environ,
            "SIDEKICKS_KILLS": str(kills),
            "SIDEKICKS_KILLS_SEED": str(seed),
            "SIDEKICKS_KILLS_FIGURES": str(figures_file),
            # ports from a block of its own (matrix_helpers.worker_port): beside suites run with
            # workers, the block of worker 0 is theirs, and a restarted bridge found its port taken
            "PYTEST_XDIST_WORKER": "gw12",
        }
        command = [sys.executable, "-m", "pytest", "tests/integration/test_kill9.py", "-q", "-n", "0"]
        # the batch's folders (the bridge's log among them) kept where a failed batch says
        command += ["-p", "no:cacheprovider", "-m", "not scale", "--basetemp", str(KEPT / f"seed-{seed}")]
        KEPT.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(command, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
        figures = json.loads(figures_file.read_text()) if figures_file.exists() else {}
    return done.returncode, figures, done.stdout + done.stderr


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.bench_kills")
    parser.add_argument("kills", type=int, nargs="?", default=1000)
    parser.add_argument("--batch", type=int, default=50, help="kills per run of the scene")
    parser.add_argument("--seed", type=int, default=FIRST_SEED + 1, help="the first batch's seed (then +1 each)")
    args = parser.parse_args(argv)
    totals: Counter = Counter()
    began = time.monotonic()
    seed = args.seed - 1
    while totals["kills"] < args.kills:
        seed += 1
        code, figures, output = batch(min(args.batch, args.kills - totals["kills"]), seed)
        totals.update({k: v for k, v in figures.items() if isinstance(v, int)})
        shown = ", ".join(f"{name} {totals[name]}" for name in SHOWN)
        load = os.getloadavg()[0]
        print(f"seed {seed}: {shown}; {time.monotonic() - began:.0f} s, load {load:.1f}", flush=True)
        if code != 0:
            print(output[-6000:], flush=True)
            print(f"the batch's folders, its bridge.log among them: {KEPT / f'seed-{seed}'}", flush=True)
            return 1
    print("totals: " + json.dumps(dict(totals)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
