import pytest
from bridge_harness import start_bridge
from matrix_helpers import logged_in, private_homeserver


@pytest.fixture
async def bridge_factory(homeserver, tmp_path):
    """`await bridge_factory(agents, **config)` starts a bridge; all are stopped at the end."""
    started = []

    async def make(agents, folder=None, **top):
        running = await start_bridge(homeserver, folder or tmp_path / f"bridge{len(started)}", agents, **top)
        started.append(running)
        return running

    yield make
    for running in reversed(started):
        await running.stop()


@pytest.fixture
async def owner(homeserver):
    """The owner's matrix-nio client on the shared Synapse (a device and a store of its own,
    recording events, no end-to-end encryption: tests/matrix_helpers.py `login`), closed at the
    end whatever happened. Name it after `bridge_factory` among a test's arguments: it is then
    closed before the test's bridges stop, as a `try/finally` in the test would."""
    async with logged_in(homeserver, homeserver.owner_id, homeserver.owner_password) as client:
        yield client


@pytest.fixture
async def stranger(homeserver):
    """The stranger's matrix-nio client (@stranger:localhost, not the bridge's owner), like `owner`."""
    async with logged_in(homeserver, homeserver.stranger_id, homeserver.stranger_password) as client:
        yield client


@pytest.fixture
async def private_hs(tmp_path):
    """A Synapse of the test's own (tests/matrix_helpers.py `private_homeserver`), for tests that
    stop or kill it; stopped at the end."""
    async with private_homeserver(tmp_path / "hs") as hs:
        yield hs
