"""The `scale` tests: the bridge on Synapse with workers (tests/synapse_workers.py).

Here `homeserver` is that setup (one for the session: starting it takes half a minute), so the
fixtures of tests/integration/conftest.py (`bridge_factory`, `owner`, `stranger`) and the helpers
work on it unchanged: nginx is the homeserver's address, the appservice worker sends the
transactions. Two more people have their own registration on it (`people`: Ann and Ben, puppets
@sk-ann_*, @sk-ben_*) for the tests of several bridges on one homeserver.
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from synapse_workers import Person, WorkersHomeserver, synapse_with_workers

PEOPLE = ("ann", "ben")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def homeserver(tmp_path_factory) -> WorkersHomeserver:
    """Synapse with workers (main, generic worker, event persister, appservice sender), Redis,
    PostgreSQL and nginx; users owner, stranger, ann and ben."""
    people = tuple(Person(name) for name in PEOPLE)
    async with synapse_with_workers(tmp_path_factory.mktemp("workers"), people) as hs:
        yield hs


@pytest.fixture
def people(homeserver) -> list[Person]:
    return homeserver.people
