"""One agent child process: spawn, stderr tail, orderly stop.

The child gets its own process group (session) so that stopping it also
stops whatever it spawned (shells, node, language servers): nothing leaks.

With a `Sandbox` (acp/sandbox.py, docs/sandbox.md) the child is bubblewrap running the agent:
bwrap is probed once per process, and where it cannot run the agent does not start (one line
with the fix), never unsandboxed. An agent over ssh runs with `-F /dev/null` unless its command
names a config file (acp/remote.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import shutil
import signal
import sys
from collections.abc import Callable, Sequence

from . import netns, remote
from . import sandbox as sandboxes
from .errors import AgentStartError
from .sandbox import Sandbox

log = logging.getLogger(__name__)

STDERR_TAIL = 4096
PROBE_LIMIT = 20.0  # seconds the one bwrap probe may take on a busy machine

_probed: dict[bool, str | None] = {}  # network on/off → None (bwrap works) or why not


async def sandbox_problem(network: bool = True) -> str | None:
    """None if bubblewrap runs here (with or without the network: slirp4netns too), else why
    not, in a few words. Probed once per process and network setting."""
    if network in _probed:
        return _probed[network]
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        problem: str | None = "bubblewrap is not installed: no bwrap on PATH"
    elif network and shutil.which("slirp4netns") is None:
        problem = "slirp4netns is not installed: no slirp4netns on PATH"
    else:
        try:
            problem = await asyncio.wait_for(_probe(bwrap, network), PROBE_LIMIT)
        except TimeoutError:
            problem = f"bwrap did not run within {PROBE_LIMIT:g} s"
        except OSError as exc:
            problem = f"bwrap cannot run: {exc.strerror or exc}"
    _probed[network] = problem
    return problem


def fix_for(problem: str) -> str:
    """The fix for what `sandbox_problem` said: slirp4netns's, or bubblewrap's."""
    return netns.FIX if "slirp4netns" in problem else sandboxes.FIX


async def _probe(bwrap: str, network: bool) -> str | None:
    """Run `true` in a sandbox as agents get it (with its network when `network`): None, or
    bwrap's last line of error (else what failed in the network's set-up)."""
    info_r, info_w = os.pipe() if network else (-1, -1)
    block_r, block_w = os.pipe() if network else (-1, -1)
    fds = (info_w, block_r) if network else None
    link, why = netns.Network("probe"), None
    try:
        probe = await asyncio.create_subprocess_exec(
            *sandboxes.probe_argv(network, bwrap, fds),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=fds or (),
        )
        try:
            if network:
                os.close(info_w)
                os.close(block_r)
                info_w = block_r = -1
                try:
                    await link.attach(info_r, block_w)
                except (RuntimeError, OSError) as exc:
                    why = str(exc)
                    with contextlib.suppress(ProcessLookupError):
                        probe.kill()
            _, err = await probe.communicate()
        finally:
            if probe.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    probe.kill()
                await probe.wait()
    finally:
        await link.close()
        for fd in (info_r, info_w, block_r, block_w):
            if fd >= 0:
                os.close(fd)
    lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
    if probe.returncode == 0 and why is None:
        return None
    return lines[-1] if lines else (why or f"bwrap failed (exit code {probe.returncode})")


def other_homes() -> tuple[str, ...]:
    """Other users' home folders (people's: uid 0 or ≥ 1000), to hide from agents."""
    mine = os.path.realpath(os.path.expanduser("~"))
    found = []
    for entry in pwd.getpwall():
        if entry.pw_uid != 0 and not 1000 <= entry.pw_uid < 65534:
            continue
        home = os.path.realpath(entry.pw_dir) if entry.pw_dir else ""
        if home not in ("", "/", mine) and not sandboxes.under(mine, home):
            found.append(home)
    return tuple(dict.fromkeys(found))


def _resolv() -> tuple[int, str] | None:
    """(a pipe holding the sandbox's resolv.conf, where it goes) when the host's names a resolver
    on its own loopback (acp/sandbox.py `resolver`), else None."""
    path = os.path.realpath("/etc/resolv.conf")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = sandboxes.resolver(handle.read(65536))
    except OSError:
        return None
    if text is None:
        return None
    read, write = os.pipe()
    os.write(write, text.encode())  # a few lines: the pipe holds them
    os.close(write)
    return read, path


def _kinds(paths: Sequence[str]) -> dict[str, str]:
    """path → "dir" or "file", for those that exist."""
    return {path: "dir" if os.path.isdir(path) else "file" for path in paths if os.path.lexists(path)}


class AgentProcess:
    def __init__(
        self,
        name: str,
        command: Sequence[str],
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        sandbox: Sandbox | None = None,
    ):
        self.name = name
        self.sandbox = sandbox
        self.command = list(command)
        self.cwd = os.path.abspath(os.path.expanduser(cwd)) if cwd else None
        self.env = {str(k): str(v) for k, v in (env or {}).items()}  # YAML may give numbers
        self.proc: asyncio.subprocess.Process | None = None
        self._tail = bytearray()
        self._stderr_task: asyncio.Task | None = None
        self.on_stderr: Callable[[bytes], None] | None = None  # each chunk of stderr as it comes
        self._network: netns.Network | None = None  # slirp4netns and forwarders (network: on)
        self._link_fds: tuple[int, int] | None = None  # bwrap's info fd, block fd: the bridge's ends

    async def start(self) -> None:
        if not self.command:
            raise AgentStartError(f"{self.name}: no command configured")
        if self.cwd and not os.path.isdir(self.cwd):
            raise AgentStartError(f"{self.name}: working directory not found: {self.cwd}")
        env = {**os.environ, **self.env}
        if self.sandbox is not None:
            env = sandboxes.environment(self.env, os.environ)
        executable = self.command[0]
        # Resolve with the agent's own PATH, so the error names the real cause
        # (a missing cwd also raises FileNotFoundError from exec).
        if os.sep not in executable and shutil.which(executable, path=env.get("PATH")) is None:
            raise AgentStartError(f"{self.name}: command not found: {executable}")
        command, fds = self.command, ()
        if self.sandbox is not None:
            command, fds = await self._sandboxed(env)
        elif remote.is_remote(command):  # ssh reads no config file an agent could have written
            command = remote.command_line(command)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *command,
                cwd=self.cwd,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=fds,
            )
        except FileNotFoundError:
            raise AgentStartError(f"{self.name}: command not found: {executable}") from None
        except PermissionError:
            raise AgentStartError(f"{self.name}: command not executable: {executable}") from None
        except OSError as exc:
            raise AgentStartError(f"{self.name}: cannot start {executable}: {exc.strerror or exc}") from None
        finally:
            for fd in fds[1:]:  # bwrap's ends of the network's pipes (not the lifeline)
                os.close(fd)
            if self.proc is None and self._link_fds is not None:
                for fd in self._link_fds:
                    os.close(fd)
                self._link_fds = None
        self._stderr_task = asyncio.create_task(self._drain_stderr(), name=f"acp-stderr-{self.name}")
        if self._link_fds is not None:
            await self._connect()

    async def _connect(self) -> None:
        """Give the sandbox its network (acp/netns.py), then let bwrap run the agent."""
        assert self._link_fds is not None and self._network is not None
        info_r, block_w = self._link_fds
        self._link_fds = None
        try:
            await self._network.attach(info_r, block_w)
        except (RuntimeError, OSError) as exc:
            self.kill()
            await self.wait(5)
            await self._network.close()
            said = [line.strip() for line in (await self.stderr_settled()).splitlines() if line.strip()]
            why = said[-1] if said else str(exc)  # bwrap's own reason first
            raise AgentStartError(f"{self.name}: sandbox cannot run: {why}; {fix_for(why)}") from None
        finally:
            os.close(info_r)
            os.close(block_w)

    async def _sandboxed(self, env: dict[str, str]) -> tuple[list[str], tuple[int, ...]]:
        """The supervised bwrap command line for this agent and the fds it is given
        (AgentStartError if bwrap cannot run here)."""
        assert self.sandbox is not None
        problem = await sandbox_problem(self.sandbox.network)
        if problem is not None:
            raise AgentStartError(f"{self.name}: sandbox cannot run: {problem}; {fix_for(problem)}")
        cwd = os.path.realpath(self.cwd or os.getcwd())
        policy = self._policy(shutil.which(self.command[0], path=env.get("PATH")) or self.command[0])
        for folder in policy.write:  # an agent's state folder it has not made yet (~/.claude …)
            if not os.path.lexists(folder) and folder != "/":
                try:
                    os.makedirs(folder, exist_ok=True)
                except OSError as exc:
                    raise AgentStartError(
                        f"{self.name}: cannot make the folder {folder} (sandbox write:): {exc.strerror or exc}"
                    ) from None
        fds: tuple[int, ...] = (netns.lifeline(),)
        link = None
        if policy.network or policy.host_ports:
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            network = netns.Network(self.name, policy.host_ports, internet=policy.network)
            self._link_fds, self._network = (info_r, block_w), network
            link, fds = (info_w, block_r), (*fds, info_w, block_r)
        resolv = _resolv() if policy.network else None
        if resolv is not None:
            fds = (*fds, resolv[0])
        line = sandboxes.argv(
            policy, self.command, cwd, _kinds((cwd, *policy.paths())), shutil.which("bwrap") or "bwrap", link, resolv
        )
        return netns.supervised(line), fds

    def _policy(self, executable: str) -> Sandbox:
        """The sandbox with every path real: its own, other people's homes and /run hidden,
        what it runs kept readable."""
        assert self.sandbox is not None
        run_hidden, run_kept = sandboxes.run_folders(
            os.path.realpath("/etc/resolv.conf"),
            [os.path.realpath(p) for p in ("/run", "/var/run") if os.path.isdir(p)],
        )
        return Sandbox(
            write=tuple(os.path.realpath(p) for p in self.sandbox.write),
            read=tuple(os.path.realpath(p) for p in self.sandbox.read),
            hide=tuple(os.path.realpath(p) for p in (*self.sandbox.hide, *other_homes(), *run_hidden)),
            reach=tuple(os.path.realpath(p) for p in self.sandbox.reach),
            # the agent's own program, and the Python (and this package) the MCP command runs;
            # what name resolution needs of /run
            keep=tuple(
                os.path.realpath(p)
                for p in (
                    *self.sandbox.keep,
                    os.path.abspath(os.path.join(self.cwd or "", executable)),
                    sys.prefix,
                    sys.base_prefix,
                    os.path.dirname(os.path.dirname(__file__)),
                    *run_kept,
                )
            ),
            network=self.sandbox.network,
            host_ports=self.sandbox.host_ports,
        )

    async def _drain_stderr(self) -> None:
        # Read continuously so a chatty agent never blocks on a full pipe; keep
        # only the end, which is what explains a crash.
        assert self.proc and self.proc.stderr
        while chunk := await self.proc.stderr.read(1 << 16):
            self._tail += chunk
            if self.on_stderr is not None:  # a login reads what it asks there (acp/client.py)
                self.on_stderr(chunk)
            if len(self._tail) > 2 * STDERR_TAIL:
                del self._tail[:-STDERR_TAIL]

    @property
    def stdin(self) -> asyncio.StreamWriter:
        assert self.proc and self.proc.stdin
        return self.proc.stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self.proc and self.proc.stdout
        return self.proc.stdout

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    def stderr_tail(self) -> str:
        return bytes(self._tail[-STDERR_TAIL:]).decode("utf-8", "replace")

    async def wait(self, timeout: float | None = None) -> int | None:
        """The exit code, or None if still running after `timeout`."""
        if not self.proc:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout)
        except TimeoutError:
            return None

    async def stderr_settled(self, timeout: float = 1.0) -> str:
        """The tail once the child's stderr reached EOF (bounded wait)."""
        if self._stderr_task:
            await asyncio.wait({self._stderr_task}, timeout=timeout)
        return self.stderr_tail()

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def stop(self, stdin_grace: float = 1.0, term_grace: float = 2.0) -> int | None:
        """Close stdin, then SIGTERM, then SIGKILL; always clean up the group. A sandboxed agent
        runs in a session of its own below bwrap: its processes are found (before bwrap can end
        and leave them to init) and signalled too."""
        if self.proc is None:
            return None
        family = _descendants(self.proc.pid) if self.proc.returncode is None else []
        if self.proc.returncode is None:
            try:
                self.proc.stdin.close()
            except Exception:
                pass
            if await self.wait(stdin_grace) is None:
                self._signal_group(signal.SIGTERM)
                if await self.wait(term_grace) is None:
                    log.warning("%s: did not stop after SIGTERM, killing", self.name)
                    self._signal_group(signal.SIGKILL)
                    await self.wait(5)
        # Children left behind by the agent would otherwise outlive it.
        self._signal_group(signal.SIGKILL)
        for pid in family:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._stderr_task:
            await asyncio.wait({self._stderr_task}, timeout=1)
            self._stderr_task.cancel()
        if self._network is not None:
            await self._network.close()
        return self.proc.returncode

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` now (children first), read from /proc; [] where there is none."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo += children.get(child, [])
    return found
