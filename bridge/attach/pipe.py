"""`sidekicks acp [-c CONFIG] [--agent NAME]`: an ACP agent over stdio that any ACP client (Zed,
JetBrains, acpx) starts like any agent; it passes the client's stream to the running bridge
through its socket (server.py) and back, byte for byte, after one hello line saying the agent.
It ends when either side does: a bridge that stops ends it, and the client sees its agent go.
stdout is the ACP stream: nothing else is written there; troubles go to stderr in one line.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

from . import wire
from .server import socket_path

CHUNK = 1 << 16


def _copy(read, write) -> None:
    """Bytes from `read` to `write` until the end of `read` (or a write that fails)."""
    try:
        while True:
            data = read(CHUNK)
            if not data:
                return
            write(data)
    except OSError:
        return


def _write_all(fd: int):
    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return write


def run(data_dir: str, agent: str | None) -> int:
    """Relay stdin ⇄ the bridge's socket ⇄ stdout; the exit code."""
    path = socket_path(data_dir)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError as exc:
        print(
            f"sidekicks acp: the bridge is not reachable at {path} ({exc.strerror or exc}): is it running?",
            file=sys.stderr,
        )
        return 1
    conn.sendall(wire.hello_line(agent))
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()

    def upstream() -> None:
        _copy(lambda n: os.read(stdin, n), conn.sendall)
        try:
            conn.shutdown(socket.SHUT_WR)  # the client is gone: the bridge sees the end
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()
    _copy(conn.recv, _write_all(stdout))  # until the bridge closes (it stopped, or the client left)
    conn.close()
    return 0
