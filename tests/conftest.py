"""Shared fixtures. `homeserver`: one real Synapse for the whole test session.

Synapse starts in about a second, but creating it for every test would still add up, so it is
shared: tests make their own rooms (and, if they need them, their own users with
`homeserver.server.register_user`). Helpers to drive it from matrix-nio live in
tests/matrix_helpers.py.

In parallel (pytest-xdist, `./sidekicks test` passes `-n 3 --dist loadfile`) each worker is a
session of its own: its own Synapse, its own PostgreSQL cluster (tests/unit/store/conftest.py), its
own temporary folders and its own block of ports (matrix_helpers.worker_port); a test module
runs whole on one worker, so its module-scoped fixtures and its tests' order stay as they are.
"""

from __future__ import annotations

import os

import pytest
import pytest_asyncio
from hypothesis import settings
from matrix_helpers import FIGURES, TestHomeserver, private_homeserver

# The fuzz tests (hypothesis) draw the same examples on every run, so a run of the suite is
# repeatable and CI never fails on a draw nobody saw before; SIDEKICKS_FUZZ=explore draws new
# ones (inputs found that way go into the tests as @example).
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("SIDEKICKS_FUZZ") == "explore" else "repeatable")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def homeserver(tmp_path_factory) -> TestHomeserver:
    """A running Synapse on 127.0.0.1 with the bridge's appservice registration loaded.

    Server name "localhost"; users @owner:localhost and @stranger:localhost exist; the
    appservice (bot @sidekicks:localhost, puppets @sk_*:localhost) is expected to listen on
    127.0.0.1:<as_port>, which nothing does until a test starts the bridge there. Rate limits
    are lifted so tests never see 429. See TestHomeserver for the fields.
    """
    async with private_homeserver(tmp_path_factory.mktemp("homeserver")) as hs:
        yield hs


def pytest_configure(config):
    """A pytest-xdist worker given $SIDEKICKS_TEST_POSTGRES works in a database of its own on that
    server (`<database>_gw1`, made if missing): each test empties the tables it uses."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    url = os.environ.get("SIDEKICKS_TEST_POSTGRES")
    if worker and url:
        from urllib.parse import urlsplit, urlunsplit

        import psycopg2
        from psycopg2 import sql

        parts = urlsplit(url)
        own = f"{parts.path.strip('/')}_{worker}"
        admin = psycopg2.connect(url)
        admin.autocommit = True
        with admin.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (own,))
            if cursor.fetchone() is None:
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(own)))
        admin.close()
        os.environ["SIDEKICKS_TEST_POSTGRES"] = urlunsplit(parts._replace(path=f"/{own}"))


# In parallel, the longest modules start first: one begun last (test_kill9, minutes alone) would
# keep the run going after every other worker is done. Without workers the order stays as collected.
# (by their --durations in a run of three workers)
SLOW_FIRST = (
    "test_kill9.py",
    "test_opencode_handoff.py",
    "test_kv_states.py",
    "test_restarts.py",
    "test_e2ee.py",
    "test_opencode.py",
    "test_local_model_agent.py",
    "test_mcp_schedules.py",
    "test_opencode_tools.py",
    "test_matrix_mcp.py",
    "test_homeserver_kill9.py",
    "test_remote_agents.py",
)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: n for n, name in enumerate(SLOW_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: the rest as collected


# ---- figures: suites that measure (kill -9, strangers) print them at the end of the run ----------
# A test's figures travel on its report (user_properties), so the run's summary shows them also
# when the test ran in a pytest-xdist worker.


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown":
        shown = getattr(item.session, "_figures_reported", 0)
        report.user_properties.extend(("figures", entry) for entry in FIGURES[shown:])
        item.session._figures_reported = len(FIGURES)
    return report


_REPORTED: list[tuple[str, dict]] = []


def pytest_runtest_logreport(report):
    _REPORTED.extend(value for key, value in report.user_properties if key == "figures")


def pytest_terminal_summary(terminalreporter):
    if _REPORTED:
        terminalreporter.section("figures")
        for name, figures in _REPORTED:
            terminalreporter.write_line(f"{name}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
