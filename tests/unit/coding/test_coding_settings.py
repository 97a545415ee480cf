"""bridge/coding/settings.py's pure parts."""

from types import SimpleNamespace

from bridge.coding.settings import answering_where


def test_status_says_in_which_conversation_of_the_channel_an_agent_answers():
    portal = SimpleNamespace(runs={"": SimpleNamespace(agent_name="alice"), "$t1": SimpleNamespace(agent_name="bob")})
    assert answering_where(portal, "alice", "") == "answering here"
    assert answering_where(portal, "alice", "$t1") == "answering in the main timeline"
    assert answering_where(portal, "bob", "$t1") == "answering here"
    assert answering_where(portal, "bob", "") == "answering in a thread here"
    assert answering_where(portal, "bob", "$t2") == "answering in a thread here"
