"""Another host for agents over ssh: Debian's OpenSSH server on 127.0.0.2 (the loopback network
is all of 127.0.0.0/8, so nothing needs configuring), started by the test with its own config,
host key and authorized key in a folder of its own.

    from ssh_host import SshHost

    host = SshHost(folder)          # keys and sshd_config made here
    host.start()                    # sshd listening; host.stop() ends it and every session
    host.command(workdir, [python, agent.py, ...])   # an agents.<name>.command over ssh

The command is what an owner writes (docs/configuration.md "Agents on other hosts"): a key of
its own (`-i`), the host key pinned (`UserKnownHostsFile`, `StrictHostKeyChecking=yes`),
`BatchMode=yes`, and the remote command `cd DIR && exec AGENT`: the agent works in DIR, a folder
on that host the bridge's config never names. The bridge adds `-F /dev/null` itself
(acp/remote.py).

Run as root (as the suite is here) sshd needs its privilege separation folder, /run/sshd, which
Debian's service makes when it starts: `start` makes it if it is missing. The login is the
user running the tests.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ADDRESS = "127.0.0.2"
SSHD = "/usr/sbin/sshd"


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def _below() -> dict[int, list[int]]:
    """Each process's children (from /proc)."""
    below: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            below.setdefault(int(fields[1]), []).append(int(entry))
    return below


def _children(pid: int) -> list[int]:
    """Every process below `pid`, children first (from /proc)."""
    below = _below()
    found, todo = [], list(below.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo += below.get(child, [])
    return found


def available() -> str | None:
    """None if an sshd can run here, else why not."""
    if not os.path.exists(SSHD):
        return f"no {SSHD} (apt-get install openssh-server)"
    if not shutil.which("ssh"):
        return "no ssh client (apt-get install openssh-client)"
    return None


class SshHost:
    def __init__(self, folder: Path, address: str = ADDRESS) -> None:
        self.folder = folder
        self.address = address
        self.port = _free_port(address)
        self.user = getpass.getuser()
        self.key = folder / "client_key"
        self.known_hosts = folder / "known_hosts"
        self.config = folder / "sshd_config"
        self.log = folder / "sshd.log"
        self.proc: subprocess.Popen | None = None
        self.left: set[int] = set()  # what the cut connections ran: ended at `stop` if still there
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        for name in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(folder / name)], check=True
            )
        (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
        host_key = (folder / "host_key.pub").read_text().split()
        self.known_hosts.write_text(f"[{address}]:{self.port} {host_key[0]} {host_key[1]}\n")
        self.config.write_text(
            "\n".join(
                [
                    f"ListenAddress {address}:{self.port}",
                    f"HostKey {folder / 'host_key'}",
                    f"AuthorizedKeysFile {folder / 'authorized_keys'}",
                    f"PidFile {folder / 'sshd.pid'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    f"AllowUsers {self.user}",
                    "StrictModes no",  # the keys live under /tmp, which is world-writable
                    "PrintMotd no",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )

    def command(self, workdir: Path, agent: list[str]) -> list[str]:
        """agents.<name>.command: `agent` run over ssh on this host, in `workdir`."""
        return [
            "ssh",
            "-i",
            str(self.key),
            "-p",
            str(self.port),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "IdentitiesOnly=yes",
            f"{self.user}@{self.address}",
            f"cd {shlex.quote(str(workdir))} && exec {shlex.join(agent)}",
        ]

    def start(self, timeout: float = 30) -> None:
        """sshd running and accepting connections."""
        if self.proc is not None and self.proc.poll() is None:
            return
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection((self.address, self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd not on {self.address}:{self.port} after {timeout:g} s") from None
                time.sleep(0.05)

    def sessions(self) -> list[int]:
        """The processes of the connections sshd serves now (its children, and theirs)."""
        return _children(self.proc.pid) if self.proc is not None and self.proc.poll() is None else []

    def kill_sessions(self) -> int:
        """Cut every connection as a dead link would: sshd's per-connection processes killed
        (-9); the programs they ran are left to end on their own (their stdin closes). Returns
        how many connections were cut."""
        if self.proc is None:
            return 0
        cut = 0
        self.left.update(self.sessions())
        for pid in [p for p in self.sessions() if p in set(_direct(self.proc.pid))]:
            try:
                os.kill(pid, signal.SIGKILL)
                cut += 1
            except ProcessLookupError:
                pass
        return cut

    def stop(self) -> None:
        """sshd and everything it started, ended."""
        if self.proc is None:
            return
        family = self.sessions()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in [*family, *self.left]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None


def _direct(pid: int) -> list[int]:
    return _below().get(pid, [])
