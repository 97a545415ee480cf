"""Soak of exactly once across kill -9: the scene of tests/integration/test_kill9.py (the owner
writing in a DM, the bridge killed with SIGKILL at random moments, also while the owner writes
and while it is down) with many more kills: `python -m tests.bench.bench_kills [KILLS]` (default
1,000; ~4 s a kill on an idle 2-core machine). The suite runs the same test with 30 kills.
Prints the test's figures (lost, answered twice, out of order, interrupted before it began, …);
exit code 1 if any invariant broke. Figures: docs/reliability.md "Restarts".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    command = [sys.executable, "-m", "pytest", "tests/integration/test_kill9.py", "-q", "-n", "0"]
    command += ["-p", "no:cacheprovider", "-m", "not scale"]
    env = {**os.environ, "SIDEKICKS_KILLS": str(kills)}
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
