"""Store tests run on file SQLite, in-memory SQLite and a real PostgreSQL.

PostgreSQL: the URL in $SIDEKICKS_TEST_POSTGRES if set (its sk_* tables are
dropped before every test), otherwise a throwaway cluster made with the local
PostgreSQL binaries (initdb, pg_ctl) for the test session. Missing binaries make
the tests fail, not skip: CI must install them.
"""

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from store import Store
from store.schema import TABLES

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


class _Cluster:
    """A PostgreSQL cluster in a temporary directory, for one test session."""

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.root = Path(tempfile.mkdtemp(prefix="sidekicks-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
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
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", PG_USER, "-E", "UTF8", "--no-sync")
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
        admin = psycopg2.connect(host="127.0.0.1", port=self.port, user=PG_USER, dbname="postgres")
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {PG_DATABASE}")
        admin.close()
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{PG_DATABASE}"

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


@dataclass
class RestartablePostgres:
    url: str
    cluster: _Cluster


@pytest.fixture(scope="module")
def restartable_postgres():
    """A PostgreSQL cluster of the module's own, which its tests may restart or stop: the
    session's server (or $SIDEKICKS_TEST_POSTGRES) is left alone."""
    cluster = _Cluster()
    try:
        url = cluster.start()
        yield RestartablePostgres(url, cluster)
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_url():
    if os.environ.get(PG_ENV):
        yield os.environ[PG_ENV]
        return
    cluster = _Cluster()
    try:
        url = cluster.start()
        yield url
    finally:
        cluster.stop()


def _drop_tables(url: str) -> None:
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cursor:
        # Tables, and whatever else a test left under their names (a view).
        cursor.execute(
            "SELECT relname, relkind FROM pg_class WHERE relname = ANY(%s) AND pg_table_is_visible(oid)",
            (list(TABLES),),
        )
        for name, kind in cursor.fetchall():
            cursor.execute(f"DROP {'VIEW' if kind == 'v' else 'TABLE'} IF EXISTS {name} CASCADE")
    conn.close()


@pytest.fixture
def drop_tables():
    """`drop_tables(url)`: the sk_* tables of a PostgreSQL database gone (a test's own setup)."""
    return _drop_tables


@dataclass
class Backend:
    name: str
    database: str  # Store.open's first argument
    folder: Path | None


def _backend(name: str, request, tmp_path: Path) -> Backend:
    if name == "postgresql":
        url = request.getfixturevalue("postgres_url")
        _drop_tables(url)  # each test starts from an empty database
        return Backend(name, url, None)
    if name == "sqlite":
        return Backend(name, "sqlite", tmp_path / "data")
    return Backend(name, ":memory:", None)


# Marked so that `-m "not postgres"` can leave them out where no server exists.
POSTGRESQL = pytest.param("postgresql", marks=pytest.mark.postgres)


@pytest.fixture(params=["sqlite", "memory", POSTGRESQL])
def backend(request, tmp_path) -> Backend:
    return _backend(request.param, request, tmp_path)


@pytest.fixture(params=["sqlite", POSTGRESQL])
def durable_backend(request, tmp_path) -> Backend:
    """Only the backends that outlive a Store: reopening, locking."""
    return _backend(request.param, request, tmp_path)


def _opener(backend: Backend):
    opened: list[Store] = []

    def open_store() -> Store:
        store = Store.open(backend.database, backend.folder)
        opened.append(store)
        return store

    return open_store, opened


@pytest.fixture
def open_store(backend):
    """Opens a Store on the test's database; all are closed after the test."""
    opener, opened = _opener(backend)
    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def open_durable(durable_backend):
    opener, opened = _opener(durable_backend)
    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store) -> Store:
    return open_store()


@pytest.fixture
def channel(store):
    """A channel with two members, alice and bob (a test module may define its own)."""
    channel = store.create_channel("!room:hs", "general")
    store.add_member(channel.id, "alice")
    store.add_member(channel.id, "bob")
    return channel
