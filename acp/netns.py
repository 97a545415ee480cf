"""A sandboxed agent's own network and its end with the bridge (docs/sandbox.md "The network",
"Ending with the bridge").

Every sandbox has a network namespace of its own (bwrap `--unshare-net`): only its loopback.
With `network: on` the bridge gives it the internet through slirp4netns, a user-mode TCP/IP
stack run outside the namespace against it (`--disable-host-loopback`: 10.0.2.2 does not lead
to the host's 127.0.0.1, and the namespace shares no abstract unix socket with the host):

1. bwrap writes the sandbox's pid to `--info-fd` and waits on `--block-fd` before it runs the
   agent; the bridge waits until bwrap has set up the namespace's loopback (slirp4netns brings
   `lo` up too: first, it made bwrap's own set-up fail);
2. the bridge starts slirp4netns against that pid (`--configure --mtu=65520`; `--userns-path`
   when bwrap made a user namespace, i.e. not as root), waits for its `--ready-fd`, binds the
   `host_ports` listeners inside the namespace (`forward.py`), then lets bwrap go on: the
   agent's first connection finds the network up;
3. slirp4netns ends when its `--exit-fd` closes: when the agent stops, or the bridge dies.

The agent ends with the bridge, however the bridge ends: bwrap runs `--die-with-parent` below
`sh` (`SUPERVISOR`, the system's shell, its script from the bridge's memory: nothing an agent
could have written). The shell waits for bwrap; a second shell of it waits for EOF on the
lifeline, a pipe whose only writer is the bridge. When the bridge dies the agent reads what is
left in its stdin, then EOF, and ends as it does unsandboxed; one that is still running `GRACE`
seconds later is killed: the shell kills itself, bwrap dies with it and the kernel ends every
process of the sandbox's PID namespace.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Sequence

GRACE = 5.0  # seconds an agent has to end on EOF once the bridge died
READY_LIMIT = 20.0  # seconds slirp4netns may take to configure the namespace on a busy machine
FIX = "install slirp4netns (apt-get install slirp4netns), or set sandbox: {network: off} for this agent"

# $1: the lifeline's fd, $2: the grace in seconds, then bwrap's command line. The watcher's
# `kill` ends this shell, and bwrap (--die-with-parent) and the sandbox with it. bwrap runs in
# the foreground: its stdin is the agent's, its signals as the bridge left them.
# (dash takes no fd above 9 in a redirection: the lifeline is opened again through /dev/fd; bwrap
# keeps it open too, which gives the agent nothing: it can only read, and nothing is written)
SUPERVISOR = """l=$1 g=$2; shift 2
{ read -r _ </dev/fd/"$l"; sleep "$g"; kill -KILL $$; } </dev/null >/dev/null 2>&1 &
w=$!
"$@"
s=$?
kill "$w" 2>/dev/null
exit "$s"
"""

_lifeline: tuple[int, int] | None = None


def lifeline() -> int:
    """The read end of the bridge's lifeline (made once, never written, closed by the kernel
    when the bridge ends): EOF there tells each supervisor the bridge is gone."""
    global _lifeline
    if _lifeline is None:
        _lifeline = os.pipe()  # both ends close-on-exec: only the supervisors get the read end
    return _lifeline[0]


def supervised(bwrap_argv: Sequence[str], grace: float = GRACE, shell: str = "/bin/sh") -> list[str]:
    """The command line that runs `bwrap_argv` (with `--die-with-parent`) below the supervisor."""
    return [shell, "-c", SUPERVISOR, "sh", str(lifeline()), f"{grace:g}", *bwrap_argv]


class Network:
    """What gives one sandbox the internet: its slirp4netns and its host_ports forwarders."""

    def __init__(self, name: str, host_ports: Sequence[int] = (), internet: bool = True):
        self.name = name
        self.host_ports = tuple(host_ports)
        self.internet = internet  # False: the forwarders only (`network: off`, the bridge's MCP port)
        self.slirp: subprocess.Popen[bytes] | None = None
        self._exit_w: int | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._draining = False

    async def attach(self, info_r: int, block_w: int) -> None:
        """Read the sandbox's pid from bwrap's info fd, give its namespace the internet, then
        let bwrap run the agent. RuntimeError (one line) when it cannot."""
        pid = await _child_pid(info_r)
        await _loopback_up(pid)
        if self.internet:
            await self._slirp(pid)
        if self.host_ports:
            from .forward import forward

            self._servers = await forward(pid, self.host_ports)
        os.write(block_w, b"1")

    async def _slirp(self, pid: int) -> None:
        """Start slirp4netns against the namespace of `pid`; return once it is configured.
        Spawned with subprocess (vfork), not asyncio's subprocess machinery: this is on the
        agent's start path, and asyncio's spawn (its child watcher, its pipe transports) took
        a few ms more, more under load (docs/performance.md "The sandbox's start")."""
        slirp = shutil.which("slirp4netns")
        if slirp is None:
            raise RuntimeError("slirp4netns is not installed: no slirp4netns on PATH")
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_w = os.pipe()
        userns = [] if _same_userns(pid) else ["--userns-path", f"/proc/{pid}/ns/user"]
        line = [slirp, "--configure", "--mtu=65520", "--disable-host-loopback"]
        line += ["--ready-fd", str(ready_w), "--exit-fd", str(exit_r), *userns, str(pid), "tap0"]
        try:
            self.slirp = subprocess.Popen(
                line,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(ready_w, exit_r),
            )
        finally:
            os.close(ready_w)
            os.close(exit_r)
        assert self.slirp.stderr is not None
        os.set_blocking(self.slirp.stderr.fileno(), False)
        try:
            ready = await asyncio.wait_for(_read_some(ready_r), READY_LIMIT)
        except TimeoutError:
            ready = b""
        finally:
            os.close(ready_r)
        if ready != b"1":
            raise RuntimeError(f"slirp4netns could not give the sandbox its network: {await self._why()}")
        self._drain()

    def _drain(self) -> None:
        """Read what slirp4netns says from now on, so that a full pipe never stops it."""
        assert self.slirp is not None and self.slirp.stderr is not None
        fd = self.slirp.stderr.fileno()
        loop = asyncio.get_running_loop()

        def readable() -> None:
            try:
                more = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                more = b""
            if not more:
                loop.remove_reader(fd)
                self._draining = False

        loop.add_reader(fd, readable)
        self._draining = True

    async def _why(self) -> str:
        assert self.slirp is not None and self.slirp.stderr is not None
        try:
            err = await asyncio.wait_for(_read_some(self.slirp.stderr.fileno()), 2)
        except (TimeoutError, OSError):
            err = b""
        lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "it did not start"

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers = []
        if self._exit_w is not None:
            os.close(self._exit_w)  # slirp4netns ends on its exit fd
            self._exit_w = None
        slirp, self.slirp = self.slirp, None
        if slirp is None:
            return
        if not await _ended(slirp, 2):
            slirp.kill()
            await _ended(slirp, 5)
        assert slirp.stderr is not None
        if self._draining:
            asyncio.get_running_loop().remove_reader(slirp.stderr.fileno())
            self._draining = False
        slirp.stderr.close()


async def _readable(fd: int) -> None:
    """Return once `fd` is readable (or at EOF), without blocking the loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)


async def _ended(process: subprocess.Popen[bytes], limit: float) -> bool:
    """Whether `process` ended (and was reaped) within `limit` seconds: its pidfd becomes
    readable when it ends (a short poll where the kernel has no pidfd_open)."""
    if process.poll() is not None:
        return True
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:
        pidfd = -1
    try:
        if pidfd >= 0:
            await asyncio.wait_for(_readable(pidfd), limit)
        else:
            deadline = asyncio.get_running_loop().time() + limit
            while process.poll() is None and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
    except TimeoutError:
        pass
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    return process.poll() is not None


async def _read_some(fd: int) -> bytes:
    """Up to 4 KiB from `fd` once readable (b"" at EOF), without blocking the loop."""
    await _readable(fd)
    return os.read(fd, 4096)


async def _child_pid(info_r: int) -> int:
    """The sandbox's pid from bwrap's `--info-fd` JSON ({"child-pid": N, …})."""
    data = b""
    while True:
        try:
            chunk = await asyncio.wait_for(_read_some(info_r), READY_LIMIT)
        except TimeoutError:
            chunk = b""
        if not chunk:
            raise RuntimeError("bwrap ended before its sandbox was made")
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except ValueError:
            continue  # not all of it yet


async def _loopback_up(pid: int) -> None:
    """Wait until bwrap has given the sandbox's loopback its address: slirp4netns brings `lo`
    up too, and when it came first bwrap's own set-up failed ("loopback: Failed RTM_NEWADDR")."""
    deadline = asyncio.get_running_loop().time() + READY_LIMIT
    while True:
        try:
            with open(f"/proc/{pid}/net/fib_trie", "rb") as handle:
                if b"127.0.0.1" in handle.read():
                    return
        except OSError:
            raise RuntimeError("bwrap ended before its sandbox was made") from None
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"the sandbox's loopback was not up within {READY_LIMIT:g} s")
        await asyncio.sleep(0.002)


def _same_userns(pid: int) -> bool:
    """Whether the sandbox shares the bridge's user namespace (bwrap run as root)."""
    try:
        return os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino
    except OSError:
        return True
