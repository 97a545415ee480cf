"""Shared fixtures. `homeserver`: one real Synapse for the whole test session.

Synapse starts in about a second, but creating it for every test would still add up, so it is
shared: tests make their own rooms (and, if they need them, their own users with
`homeserver.server.register_user`). Helpers to drive it from matrix-nio live in
tests/matrix_helpers.py.
"""
from __future__ import annotations

import os

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


# ---- figures: suites that measure (kill -9, strangers) print them at the end of the run ----------

def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("figures")
        for name, figures in FIGURES:
            terminalreporter.write_line(f"{name}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
