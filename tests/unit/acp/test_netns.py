"""acp/netns.py: the supervisor that ends a sandbox with the bridge (docs/sandbox.md "Ending with
the bridge"), run by the real /bin/sh with a lifeline of the test's own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from acp.netns import SUPERVISOR, lifeline, supervised


def supervise(life_r: int, grace: str, *command: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["/bin/sh", "-c", SUPERVISOR, "sh", str(life_r), grace, *command], pass_fds=(life_r,), start_new_session=True
    )


def test_the_command_line_runs_bwrap_below_sh_with_the_bridge_s_lifeline():
    line = supervised(["bwrap", "--die-with-parent", "--", "agent"], grace=5)
    assert line[:3] == ["/bin/sh", "-c", SUPERVISOR]
    assert line[3:] == ["sh", str(lifeline()), "5", "bwrap", "--die-with-parent", "--", "agent"]


def test_the_supervisor_ends_with_its_command_and_says_its_exit_code():
    life_r, life_w = os.pipe()
    try:
        shell = supervise(life_r, "5", "sh", "-c", "exit 7")
        assert shell.wait(timeout=60) == 7
    finally:
        os.close(life_r)
        os.close(life_w)


def test_once_the_lifeline_closes_the_supervisor_waits_the_grace_then_kills_itself():
    life_r, life_w = os.pipe()
    shell = supervise(life_r, "0.2", "sleep", "60")
    os.close(life_r)
    try:
        os.close(life_w)  # the bridge is gone
        assert shell.wait(timeout=60) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)  # its `sleep` (bwrap would have died with it)
