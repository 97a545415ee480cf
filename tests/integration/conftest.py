import pytest

from bridge_harness import start_bridge


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
