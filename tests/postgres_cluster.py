"""A throwaway PostgreSQL cluster made with the local server binaries (initdb, pg_ctl), for the
store tests (tests/unit/store/conftest.py) and the Synapse-with-workers homeserver
(tests/synapse_workers.py). Missing binaries make the tests fail, not skip: CI must install them.

Every connection, local or over TCP, needs the cluster's password (scram-sha-256, never `trust`):
a test agent with the network on is no superuser there (docs/SECURITY.md "Limits"). The password
is in the URL `start` returns and in `dsn`.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg2
import pytest

PG_ENV = "SIDEKICKS_TEST_POSTGRES"
PG_USER = "postgres"
PG_DATABASE = "sidekicks_test"


def _pg_bindir() -> Path:
    """The directory holding initdb and pg_ctl: $PATH first, then Debian's layout."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).parent] if on_path else []

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for bindir in candidates:
        if (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            return bindir
    pytest.fail(
        "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
        f"/usr/lib/postgresql/*/bin: install them (Debian: apt-get install postgresql) "
        f"or set {PG_ENV} to a postgresql:// URL of a test database",
        pytrace=False,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """A PostgreSQL cluster in a temporary directory, for one test session."""

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="sidekicks-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        self.password = secrets.token_urlsafe(18)  # URL-safe: it goes into the URL as it is
        # initdb refuses to run as root: then run the server as 'postgres'.
        self.run_as = self._server_user() if os.geteuid() == 0 else None

    @staticmethod
    def _server_user() -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(PG_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", PG_USER], check=True)
            return pwd.getpwnam(PG_USER)

    def _run(self, *args: str) -> None:
        extra = {}
        if self.run_as is not None:
            extra = dict(user=self.run_as.pw_uid, group=self.run_as.pw_gid, extra_groups=[])
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            cwd=self.root,
            capture_output=True,
            text=True,
            **extra,
        )
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed:\n{result.stdout}{result.stderr}{log}")

    def start(self) -> str:
        if self.run_as is not None:
            os.chown(self.root, self.run_as.pw_uid, self.run_as.pw_gid)
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        if self.run_as is not None:
            os.chown(pwfile, self.run_as.pw_uid, self.run_as.pw_gid)
        try:  # password auth for local and TCP connections alike
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-A",
                "scram-sha-256",
                f"--pwfile={pwfile}",
                "-U",
                PG_USER,
                "-E",
                "UTF8",
                "--no-sync",
            )
        finally:
            pwfile.unlink()
        # Durability is pointless for a throwaway cluster: turn it off for speed.
        for attempt in range(3):
            self.port = _free_port()
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options, "start")
                break
            except RuntimeError:
                if attempt == 2:  # the port may have been taken meanwhile: retry
                    raise
        admin = self.connect()
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {PG_DATABASE}")
        admin.close()
        return f"postgresql://{PG_USER}:{self.password}@127.0.0.1:{self.port}/{PG_DATABASE}"

    def dsn(self, dbname: str = "postgres") -> dict:
        """psycopg2's connection arguments for `dbname`, the password with them."""
        return {"host": "127.0.0.1", "port": self.port, "user": PG_USER, "password": self.password, "dbname": dbname}

    def connect(self, dbname: str = "postgres"):
        return psycopg2.connect(**self.dsn(dbname))

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # for the fault tests: the server goes away under a running store, and comes back
    def restart(self) -> None:
        """`pg_ctl restart -m fast`: every connection is ended, the server is back at once."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-m", "fast", "-w", "-t", "60", "restart")

    def shut_down(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def start_again(self) -> None:
        # pg_ctl start without -o would forget the port: postmaster.opts keeps the last options
        opts = (self.data / "postmaster.opts").read_text().split(None, 1)
        options = opts[1].strip() if len(opts) > 1 else ""
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-o",
            _options_without_datadir(options),
            "start",
        )


def _options_without_datadir(options: str) -> str:
    """postmaster.opts holds `"-D" "dir" "-p" "5432" …`: the options for pg_ctl -o, minus -D."""
    import shlex

    words = shlex.split(options)
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "-D":
            skip = True
            continue
        kept.append(word)
    return " ".join(shlex.quote(word) for word in kept)
