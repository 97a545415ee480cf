"""An agent flooding the bridge's MCP socket leaves every other room served (docs/SECURITY.md
"Limits"): the socket closes, unread, connections past those waiting for their request, so an
agent holding thousands of them takes none of the bridge's file descriptors.

A real Synapse, the real bridge in this process, scripted agents, and a plain client in a process
of its own standing for an agent with a shell: it opens 2,000 connections to the socket and holds
every one of them while the owner talks to another agent in a direct room.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import subprocess
import sys

from bridge_harness import agent, answers_in, wait_until
from matrix_helpers import events_in, open_dm, sync_until

from bridge.mcp import service

BOB = "@sk_bob:localhost"
CONNECTIONS = 2000

# opens CONNECTIONS connections to the socket (argv[1]) and holds them all until stdin closes
FLOODER = r"""
import resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, deadline = [], time.monotonic() + 60
for _ in range(int(sys.argv[2])):
    if time.monotonic() > deadline:
        break
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    while time.monotonic() < deadline:
        try:
            s.connect(sys.argv[1])
            held.append(s)
            break
        except BlockingIOError:  # the listen queue is full: once the bridge has accepted more
            time.sleep(0.001)
print(f"held {len(held)}", flush=True)
sys.stdin.read()
"""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_two_thousand_connections_leave_another_room_answered(bridge_factory, tmp_path, owner, caplog):
    caplog.set_level(logging.WARNING)
    running = await bridge_factory(
        {
            "alice": agent("--log", str(tmp_path / "alice.log"), title="Alice"),
            "bob": agent("--answer", "still here", title="Bob"),
        }
    )
    path = running.bridge.mcp.path
    assert path is not None, "the agents' MCP socket is listening"
    dm = await open_dm(owner, BOB)
    # the bridge runs in this process: a usual soft limit of open files, as a bridge has without
    # raising it, so that a flood the socket did not cap would end in EMFILE here
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = open_fds()
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, max(1024, before + 700)), hard))
    flooder = subprocess.Popen(
        [sys.executable, "-c", FLOODER, str(path), str(CONNECTIONS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert flooder.stdout is not None
        held = (await asyncio.to_thread(flooder.stdout.readline)).strip()  # the bridge accepts meanwhile
        assert held == f"held {CONNECTIONS}", held  # every one was accepted (most closed at once)
        # the bridge holds few of them (those it closed unread go with the loop's next turns;
        # without the cap it would hold every one for the whole read timeout)
        bound = before + service.MAX_WAITING + 100
        await wait_until(lambda: open_fds() < bound, timeout=20, what=f"the bridge holds under {bound} files")
        await owner.room_send(dm, "m.room.message", {"msgtype": "m.text", "body": "are you there?"})
        await sync_until(owner, lambda: any(a["body"] == "still here" for a in answers_in(events_in(owner, dm), BOB)))
    finally:
        assert flooder.stdin is not None
        flooder.stdin.close()
        await asyncio.to_thread(flooder.wait, 30)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert running.bridge.mcp.closed_unread > 0
    accept_errors = [r for r in caplog.records if "accept" in r.getMessage() and r.name == "asyncio"]
    assert accept_errors == []
    said = [r for r in caplog.records if "closed unread" in r.getMessage()]
    assert 1 <= len(said) <= CONNECTIONS // 1000 + 1  # a line per thousand, not a storm
    await wait_until(running.is_idle, what="the direct room's turn is over")
