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
