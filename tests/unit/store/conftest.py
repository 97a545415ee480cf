"""Store tests run on file SQLite, in-memory SQLite and a real PostgreSQL.

PostgreSQL: the URL in $SIDEKICKS_TEST_POSTGRES if set (its sk_* tables are
dropped before every test), otherwise a throwaway cluster made with the local
PostgreSQL binaries (initdb, pg_ctl) for the test session. Missing binaries make
the tests fail, not skip: CI must install them.
"""

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest
from postgres_cluster import PG_ENV
from postgres_cluster import Cluster as _Cluster

from store import Store
from store.schema import TABLES


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


def _opening(backend: Backend) -> Iterator[Callable[[], Store]]:
    """Yields what opens a Store on `backend`; every one opened is closed afterwards."""
    opened: list[Store] = []

    def open_store() -> Store:
        store = Store.open(backend.database, backend.folder)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


@pytest.fixture
def open_store(backend):
    """Opens a Store on the test's database; all are closed after the test."""
    yield from _opening(backend)


@pytest.fixture
def open_durable(durable_backend):
    yield from _opening(durable_backend)


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
