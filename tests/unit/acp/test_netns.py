"""acp/netns.py: the supervisor that ends a sandbox with the bridge (docs/sandbox.md "Ending with
the bridge"), run by the real /bin/sh with a lifeline of the test's own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from acp.netns import SUPERVISOR, Network, _ended, lifeline, supervised


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


async def test_a_process_s_end_is_seen_and_a_running_one_is_waited_for_no_longer_than_asked():
    quick = subprocess.Popen(["true"])
    assert await _ended(quick, 60)
    assert quick.returncode == 0  # reaped
    slow = subprocess.Popen(["sleep", "60"])
    try:
        assert not await _ended(slow, 0.05)
        assert slow.returncode is None
    finally:
        slow.kill()
        slow.wait()


async def test_slirp4netns_that_cannot_start_says_its_own_reason_and_is_gone_after_close():
    nowhere = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process can have it
    network = Network("test")
    with pytest.raises(RuntimeError, match="^slirp4netns could not give the sandbox its network: ") as failed:
        await network._slirp(nowhere)
    assert "it did not start" not in str(failed.value)  # its stderr was read: its own last line
    slirp = network.slirp
    assert slirp is not None
    await network.close()
    assert slirp.returncode is not None and network.slirp is None
