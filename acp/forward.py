"""`network: {host_ports: [N, …]}`: the host's 127.0.0.1:N seen as the sandbox's own
127.0.0.1:N (docs/sandbox.md "The network").

slirp4netns forwards the other way only (a host port to the sandbox), and its way to the host's
loopback (10.0.2.2) would open every port: it runs with `--disable-host-loopback`. So the bridge
forwards the named ports itself: it listens on 127.0.0.1:N inside the sandbox's network
namespace, accepts there (a socket keeps the namespace it was made in) and connects each
connection to the host's 127.0.0.1:N. As root a thread of its own enters the namespace for the
time of the `listen` calls (setns moves one thread); otherwise a short-lived helper (the
bridge's Python, `-I -S`, its code from the bridge's memory) joins the sandbox's user and
network namespaces, listens, and hands the sockets back over a socket pair. The listeners close
when the agent stops; they end with the bridge.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)

CHUNK = 1 << 16
CLONE_NEWNET = 0x40000000

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
    try:
        fds = await (_in_a_thread(pid, ports) if _same_userns(pid) else _in_a_helper(pid, ports))
    except OSError as exc:
        raise RuntimeError(f"cannot forward host_ports {list(ports)}: {exc.strerror or exc}") from None
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


def _same_userns(pid: int) -> bool:
    """The sandbox shares the bridge's user namespace (bwrap run as root)."""
    return os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino


def _listen_there(pid: int, ports: Sequence[int]) -> list[int]:
    """In a thread of its own, which ends after (setns moves the calling thread only): enter the
    network namespace of `pid`, listen on each port, come back. Root's way: no process started."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    found: list[int] = []
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns: {os.strerror(ctypes.get_errno())}")
        try:
            for port in ports:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", port))
                s.listen(64)
                found.append(s.detach())
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                os._exit(70)  # never go on with a thread in the sandbox's network: cannot happen as root
    except BaseException:
        for fd in found:
            os.close(fd)
        raise
    finally:
        os.close(home)
        os.close(there)
    return found


async def _in_a_thread(pid: int, ports: Sequence[int]) -> list[int]:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[int]] = loop.create_future()

    def settle(result: list[int] | None, error: OSError | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result or [])

    def run() -> None:
        try:
            loop.call_soon_threadsafe(settle, _listen_there(pid, ports), None)
        except OSError as exc:
            loop.call_soon_threadsafe(settle, None, exc)

    threading.Thread(target=run, name="sandbox-forward", daemon=True).start()
    return await done


async def _in_a_helper(pid: int, ports: Sequence[int]) -> list[int]:
    """Not root: a process of its own joins the sandbox's user namespace (only a process with
    one thread may), then its network namespace, and hands the listening sockets back."""
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
            lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
            raise OSError(0, lines[-1] if lines else f"the helper failed ({helper.returncode})")
        ours.setblocking(False)
        _, fds, _, _ = socket.recv_fds(ours, 1, len(ports))
        return fds
    finally:
        ours.close()
        theirs.close()
