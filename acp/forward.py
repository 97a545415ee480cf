"""`network: {host_ports: [N, …]}`: the host's 127.0.0.1:N seen as the sandbox's own
127.0.0.1:N (docs/sandbox.md "The network").

slirp4netns forwards the other way only (a host port to the sandbox), and its way to the host's
loopback (10.0.2.2) would open every port: it runs with `--disable-host-loopback`. So the bridge
forwards the named ports itself. A short-lived helper (the bridge's Python, `-I -S`, its code
from the bridge's memory) enters the sandbox's network namespace, listens there on 127.0.0.1:N
for each port and hands the listening sockets back over a socket pair; the bridge accepts on
them (a socket keeps the namespace it was made in) and connects each to the host's 127.0.0.1:N.
The listeners close when the agent stops; they end with the bridge.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Sequence

log = logging.getLogger(__name__)

CHUNK = 1 << 16

# argv: the sandbox's pid, the socket pair's fd, the ports. Joins the sandbox's user namespace
# first when it has one of its own (bwrap as non-root), then its network namespace.
_HELPER = """import ctypes, os, socket, sys
pid, fd, ports = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
libc = ctypes.CDLL(None, use_errno=True)
for kind in ("user", "net"):
    path = f"/proc/{pid}/ns/{kind}"
    if kind == "user" and os.stat(path).st_ino == os.stat("/proc/self/ns/user").st_ino:
        continue
    ns = os.open(path, os.O_RDONLY)
    if libc.setns(ns, 0) != 0:
        sys.exit(f"setns {kind}: {os.strerror(ctypes.get_errno())}")
    os.close(ns)
found = []
for port in ports:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(64)
    found.append(s.fileno())
socket.send_fds(socket.socket(fileno=fd), [b"x"], found)
"""


async def forward(pid: int, ports: Sequence[int]) -> list[asyncio.AbstractServer]:
    """Listen on 127.0.0.1:N inside the network namespace of `pid` for each of `ports`, each
    connection forwarded to the host's 127.0.0.1:N. RuntimeError (one line) when it cannot."""
    ours, theirs = socket.socketpair()
    try:
        helper = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            _HELPER,
            str(pid),
            str(theirs.fileno()),
            *(str(p) for p in ports),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        _, err = await helper.communicate()
        if helper.returncode != 0:
            lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
            raise RuntimeError(f"cannot forward host_ports: {lines[-1].strip() if lines else helper.returncode}")
        ours.setblocking(False)
        _, fds, _, _ = socket.recv_fds(ours, 1, len(ports))
    finally:
        ours.close()
        theirs.close()
    servers: list[asyncio.AbstractServer] = []
    for port, fd in zip(ports, fds, strict=True):
        listener = socket.socket(fileno=fd)
        listener.setblocking(False)
        servers.append(await asyncio.start_server(_forwarder(port), sock=listener))
    return servers


def _forwarder(port: int):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            host_reader, host_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, host_writer), _pipe(host_reader, writer))
        finally:
            writer.close()
            host_writer.close()

    return handle


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close; an error ends the connection."""
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, RuntimeError):
        writer.close()
