"""One agent child process: spawn, stderr tail, orderly stop.

The child gets its own process group (session) so that stopping it also
stops whatever it spawned (shells, node, language servers): nothing leaks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
from typing import Sequence

from .errors import AgentStartError

log = logging.getLogger(__name__)

STDERR_TAIL = 4096


class AgentProcess:
    def __init__(self, name: str, command: Sequence[str], cwd: str | None = None,
                 env: dict[str, str] | None = None):
        self.name = name
        self.command = list(command)
        self.cwd = os.path.abspath(os.path.expanduser(cwd)) if cwd else None
        self.env = {str(k): str(v) for k, v in (env or {}).items()}  # YAML may give numbers
        self.proc: asyncio.subprocess.Process | None = None
        self._tail = bytearray()
        self._stderr_task: asyncio.Task | None = None

    async def start(self) -> None:
        if not self.command:
            raise AgentStartError(f"{self.name}: no command configured")
        if self.cwd and not os.path.isdir(self.cwd):
            raise AgentStartError(f"{self.name}: working directory not found: {self.cwd}")
        env = {**os.environ, **self.env}
        executable = self.command[0]
        # Resolve with the agent's own PATH, so the error names the real cause
        # (a missing cwd also raises FileNotFoundError from exec).
        if os.sep not in executable and shutil.which(executable, path=env.get("PATH")) is None:
            raise AgentStartError(f"{self.name}: command not found: {executable}")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command, cwd=self.cwd, env=env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            raise AgentStartError(f"{self.name}: command not found: {executable}") from None
        except PermissionError:
            raise AgentStartError(f"{self.name}: command not executable: {executable}") from None
        except OSError as exc:
            raise AgentStartError(f"{self.name}: cannot start {executable}: {exc.strerror or exc}") from None
        self._stderr_task = asyncio.create_task(self._drain_stderr(), name=f"acp-stderr-{self.name}")

    async def _drain_stderr(self) -> None:
        # Read continuously so a chatty agent never blocks on a full pipe; keep
        # only the end, which is what explains a crash.
        assert self.proc and self.proc.stderr
        while chunk := await self.proc.stderr.read(1 << 16):
            self._tail += chunk
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
        except asyncio.TimeoutError:
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
        """Close stdin, then SIGTERM, then SIGKILL; always clean up the group."""
        if self.proc is None:
            return None
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
        if self._stderr_task:
            await asyncio.wait({self._stderr_task}, timeout=1)
            self._stderr_task.cancel()
        return self.proc.returncode

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)
