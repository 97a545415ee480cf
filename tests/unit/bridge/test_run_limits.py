"""The bridge raises its soft limit of open files to the hard one at start (bridge/run.py,
docs/sandbox.md "Limits"): a flood of connections meets the MCP socket's caps, not EMFILE."""

from __future__ import annotations

import subprocess
import sys

RAISE = """
import resource
from bridge.run import raise_open_files
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
now = raise_open_files()
in_force = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
print(now == in_force, now >= min(hard, 256), hard == resource.RLIM_INFINITY or now == hard)
"""


def test_the_soft_limit_is_raised_to_the_hard_one():
    done = subprocess.run([sys.executable, "-c", RAISE], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"], done.stderr
