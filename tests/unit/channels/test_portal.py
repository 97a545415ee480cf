"""bridge/channels/portal.py's pure decisions (no homeserver, no agent)."""
from bridge.channels.portal import session_fits


def test_a_stored_session_is_used_only_in_the_directory_it_was_opened_in():
    assert session_fits("/home/me/work", "/home/me/work")
    assert session_fits("/home/me/work/", "/home/me/work")  # the same place, spelt another way
    assert not session_fits("/home/me/work", "/home/me/other")  # the config moved the agent
    assert not session_fits("/home/me/work", "/home/me/work/sub")
    assert session_fits(None, "/anywhere")  # stored before directories were kept: as before
    # no cwd configured: the agent runs wherever the bridge was started, and keeps its sessions
    # (the local model's KV states with them) whatever that folder is
    assert session_fits("/home/me/work", None) and session_fits(None, None)


async def test_a_stopping_bridge_starts_no_turn():
    """A message taken while the bridge stops (the appservice answers until the answers in
    flight are done) is queued, never started: its record stays taken, and the next start runs
    it. Seen in the restart test: such a turn met the closed agent pool and was answered
    "⚠️ the agent pool is closed", never again."""
    import asyncio
    from types import SimpleNamespace

    from bridge.channels.portal import Incoming, Portal
    from store import Channel

    stopping = asyncio.Event()
    stopping.set()
    parts = SimpleNamespace(stopping=stopping, recovered=asyncio.Event(), config=SimpleNamespace(agents={}))
    channel = Channel(id="c1", room_id="!r:hs", name="general", direct_agent=None, created=0)
    portal = Portal(parts, channel, [])
    turn = SimpleNamespace(id="t1")
    portal.submit(turn, Incoming("m1", "$e1", "hello"))
    assert portal.pending() == 1 and portal.worker is None

    stopping.clear()  # the same on a running bridge starts its worker
    portal.submit(SimpleNamespace(id="t2"), Incoming("m2", "$e2", "again"))
    assert portal.worker is not None and not portal.worker.done()
    portal.worker.cancel()
    await asyncio.gather(portal.worker, return_exceptions=True)
