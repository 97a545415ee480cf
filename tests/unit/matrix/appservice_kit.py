"""The appservice's HTTP API served for a unit test (aiohttp's test server), shared by
test_appservice.py and test_dispatch.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp.test_utils import TestClient, TestServer

from bridge.matrix.appservice import AppserviceServer

TOKEN = "hs-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def stored(call):
    """A store call as the appservice awaits it (the bridge's run on the database thread)."""

    async def awaited(*args):
        return call(*args)

    return awaited


async def nobody(user_id: str) -> bool:
    return False


@contextlib.asynccontextmanager
async def serving(
    on_transaction, keys: set | None = None, on_user=nobody, seen=None, mark=None, order=None, **extra
) -> AsyncIterator[TestClient]:
    """A client of an AppserviceServer handing transactions to `on_transaction`; the transaction
    keys it records are kept in `keys` (or `seen`/`mark` are the store's calls); `extra`: more of
    its arguments (on_gap_passed…)."""
    keys = set() if keys is None else keys
    server = AppserviceServer(
        TOKEN,
        on_transaction,
        on_user,
        seen or stored(keys.__contains__),
        mark or stored(keys.add),
        **({"order": order} if order is not None else {}),
        **extra,
    )
    client = TestClient(TestServer(server.app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
